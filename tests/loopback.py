"""The scaffolding of the tests' loopback servers: a listening socket on a free port of
127.0.0.1 and a thread that accepts connections on it."""

from __future__ import annotations

import contextlib
import socket
import threading

from typing_extensions import Self

_JOIN_S = 5.0  # the most close() waits for the accept thread to end


class LoopbackServer:
    """Listens on 127.0.0.1 (a free port, ``port``) and hands each accepted connection to
    :meth:`handle` on the accept thread. :meth:`close` sets ``stop``, ends the accept thread,
    stops listening and closes the sockets in ``open``. The accept thread starts in
    ``__init__``: a subclass sets its own fields before it calls ``super().__init__()``."""

    def __init__(self, backlog: int = 128) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = int(self.sock.getsockname()[1])
        self.stop = threading.Event()
        self.open: list[socket.socket] = []  # closed with the server
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def handle(self, conn: socket.socket) -> None:
        """Serve ``conn`` (on the accept thread: hand long work to a thread of its own)."""
        raise NotImplementedError

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.stop.is_set():  # (close()'s own wake-up, or one that came with it)
                conn.close()
                return
            self.handle(conn)

    def close(self) -> None:
        """Stop: the accept thread is woken and waited for before the listening socket is
        closed (closed under a blocked ``accept()``, the socket went on listening in the
        kernel and the thread went on answering), then the sockets in ``open`` are shut down
        (which wakes a thread reading one) and closed."""
        self.stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # Linux: a blocked accept() returns
        self._acceptor.join(_JOIN_S)
        if self._acceptor.is_alive():  # (where shutdown wakes no accept(): a connection does)
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=_JOIN_S).close()
            self._acceptor.join(_JOIN_S)
        self.sock.close()
        for conn in self.open:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
