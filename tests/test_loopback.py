"""The tests' loopback servers stop when closed: no connection is taken after ``close()``.

Closed under its accept thread, the listening socket went on listening (the thread's blocked
``accept()`` held it open in the kernel) and the thread went on answering, with the closed
server's canned answer, whatever connected to its port; the thread outlived its test, one
per server, acting on a socket the test had closed."""

from __future__ import annotations

import socket
import threading

import pytest

from .rawserver import RawServer, http_response

ANSWER = http_response(b"{}")


def _used(server: RawServer) -> None:
    """One request answered: the server's accept thread is back waiting for the next."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        answer = b""
        while piece := conn.recv(65536):
            answer += piece
    assert answer == ANSWER


def _accepting() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.endswith("(_accept)")}


def test_a_closed_server_takes_no_more_connections() -> None:
    server = RawServer(ANSWER)
    port = server.port
    _used(server)
    server.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_closed_server_leaves_no_thread_accepting() -> None:
    before = _accepting()
    server = RawServer(ANSWER)
    _used(server)
    server.close()
    assert _accepting() <= before
