"""A loopback proxy in front of Redis that holds back the answers to some commands for a
while: a Redis on a slow link, for the commands that hold a marker."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse
from types import TracebackType


class SlowAnswers:
    """Forwards every command to Redis and every answer back; the answer to a command that
    holds ``marker`` comes back ``delay`` seconds late."""

    def __init__(self, redis_url: str, marker: bytes, delay: float) -> None:
        self.target = urllib.parse.urlsplit(redis_url)
        self.marker, self.delay = marker, delay
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        port = self.sock.getsockname()[1]
        return self.target._replace(netloc=f"127.0.0.1:{port}").geturl()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection((self.target.hostname, self.target.port or 6379))
            self.open += [conn, up]
            slow = threading.Event()
            threading.Thread(target=self._out, args=(conn, up, slow), daemon=True).start()
            threading.Thread(target=self._back, args=(up, conn, slow), daemon=True).start()

    def _out(self, reader: socket.socket, writer: socket.socket, slow: threading.Event) -> None:
        try:
            while data := reader.recv(65536):
                if self.marker in data:
                    slow.set()
                writer.sendall(data)
        except OSError:
            pass
        writer.close()

    def _back(self, reader: socket.socket, writer: socket.socket, slow: threading.Event) -> None:
        try:
            while data := reader.recv(65536):
                if slow.is_set():
                    slow.clear()
                    time.sleep(self.delay)
                writer.sendall(data)
        except OSError:
            pass
        writer.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.open:
            conn.close()

    def __enter__(self) -> SlowAnswers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
