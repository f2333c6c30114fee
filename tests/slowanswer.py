"""A loopback proxy in front of Redis that holds back the answers to some commands for a
while: a Redis on a slow link, for the commands that hold a marker."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse

from .loopback import LoopbackServer


class SlowAnswers(LoopbackServer):
    """Forwards every command to Redis and every answer back; the answer to a command that
    holds ``marker`` comes back ``delay`` seconds late."""

    def __init__(self, redis_url: str, marker: bytes, delay: float) -> None:
        self.target = urllib.parse.urlsplit(redis_url)
        self.marker, self.delay = marker, delay
        super().__init__(backlog=16)

    @property
    def url(self) -> str:
        return self.target._replace(netloc=f"127.0.0.1:{self.port}").geturl()

    def handle(self, conn: socket.socket) -> None:
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
