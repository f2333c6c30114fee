"""The scaffolding of the tests' loopback servers: a listening socket on a free port of
127.0.0.1 and a thread that accepts connections on it."""

from __future__ import annotations

import socket
import threading

from typing_extensions import Self


class LoopbackServer:
    """Listens on 127.0.0.1 (a free port, ``port``) and hands each accepted connection to
    :meth:`handle` on the accept thread. :meth:`close` sets ``stop``, stops listening and
    closes the sockets in ``open``. The accept thread starts in ``__init__``: a subclass sets
    its own fields before it calls ``super().__init__()``."""

    def __init__(self, backlog: int = 128) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.stop = threading.Event()
        self.open: list[socket.socket] = []  # closed with the server
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def handle(self, conn: socket.socket) -> None:
        """Serve ``conn`` (on the accept thread: hand long work to a thread of its own)."""
        raise NotImplementedError

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.handle(conn)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for conn in self.open:
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
