"""Start the shop's real processes for tests: the app server, a private Redis, any manage.py command.

Each child gets an environment pointing at the test database and the test Redis, so what it does is
visible to the test, and runs in its own process group so that a test can kill it and its children.
Each also ends with the test run that started it (``dies_with_us``), however that run ends.
The soak (``bench/soak/``) starts its processes and its Redis server with these helpers too.
"""

import ctypes
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGTERM, *, parent: int | None = None) -> None:
    """In a child: have the kernel send it ``sig`` when its parent (pid ``parent``) ends, even by SIGKILL.
    A test run killed from outside otherwise leaves its Celery worker taking the next run's tasks."""
    parent = os.getppid() if parent is None else parent
    if _LIBC.prctl(PR_SET_PDEATHSIG, sig) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it ended before the request took effect
        os.kill(os.getpid(), sig)


def dies_with_us(sig: int = signal.SIGTERM):
    """``Popen``'s ``preexec_fn`` for a child that ends (on ``sig``) with this process. The kernel signals
    it when the *thread* that started it ends: start long-lived children from the test's own thread."""
    return functools.partial(die_with_parent, sig, parent=os.getpid())


def process_env(**overrides) -> dict:
    """The environment of a shop process on the test database and Redis; ``overrides`` win."""
    db = settings.DATABASES["default"]
    return {
        "PATH": os.environ["PATH"],
        "SECRET_KEY": settings.SECRET_KEY,
        "DATABASE_URL": f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "LOCK_KEY_PREFIX": os.environ.get("LOCK_KEY_PREFIX", "test"),
        **{key: str(value) for key, value in overrides.items()},
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    """Stop a child started with ``start_new_session`` and everything it started."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        proc.wait(30)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (``T``: stopped), or ``gone``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@contextmanager
def app_server(env: dict, log: Path, *, workers: int = 4, headers: dict | None = None):
    """gunicorn serving the shop as in production; yields (base URL, the master process).

    ``headers`` go with the readiness probe (behind a TLS proxy: ``X-Forwarded-Proto``).
    """
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "gunicorn"), "config.wsgi", "--workers", str(workers), "--bind", f"127.0.0.1:{port}"]
            + ["--timeout", "60"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_us(),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/api/products/", headers), timeout=30, what=f"gunicorn to serve ({log})")
        yield url, proc
    finally:
        stop(proc)


def _answers(url: str, headers: dict | None = None) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=2)
        return True
    except OSError:
        return False


def http(method: str, url: str, *, token: str = "", body=None, key: str = "", timeout: float = 60):
    """One JSON request; returns (status, body, headers) for errors as well as successes."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    if key:
        headers["Idempotency-Key"] = key
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


class RedisServer:
    """A private redis-server on its own port with no persistence, so a test (or the soak) can kill and
    restart it like an outage without touching anyone else's Redis.

    With no ``workdir`` it makes a temporary one, removed by ``close()``.
    """

    def __init__(self, workdir: Path | None = None):
        self.port = free_port()
        self.own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="redis-")) if workdir is None else workdir
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, replica_of: int | None = None) -> None:
        """Start it (again, on the same port), as a replica of the server on port ``replica_of`` if given."""
        replica = ["--replicaof", "127.0.0.1", str(replica_of)] if replica_of else []
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", str(self.workdir), *replica],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=dies_with_us(),
        )
        wait_for(self._answers, timeout=10, what="redis-server to start")

    def kill(self) -> None:
        """Crash it (SIGKILL): every key, so every lock and queued request, is gone."""
        stop(self.proc, signal.SIGKILL)

    def close(self) -> None:
        """Kill it if it runs, and remove the working directory it made."""
        if self.proc is not None:
            self.kill()
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def __enter__(self):
        try:
            self.start()
        except BaseException:  # half started: what did start stops here, as __exit__ is not called
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()


class RedisSentinels:
    """Redis under Sentinel, on loopback ports: a primary, a replica and three sentinels (``redis-server
    --sentinel``: the Redis package has it, no other package needed) that fail over to the replica about
    a second after the primary stops answering.

    ``env()`` is what a shop process needs to reach it (``REDIS_SENTINELS``, ``REDIS_SENTINEL_MASTER``).
    """

    MASTER = "shop"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.primary, self.replica = RedisServer(workdir / "primary"), RedisServer(workdir / "replica")
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen] = []

    def env(self) -> dict:
        sentinels = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        broker = ";".join(f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports)
        return {
            "REDIS_URL": "",
            "REDIS_SENTINELS": sentinels,
            "REDIS_SENTINEL_MASTER": self.MASTER,
            "CELERY_BROKER_URL": broker,
        }

    def start(self) -> None:
        for server in (self.primary, self.replica):
            server.workdir.mkdir(parents=True, exist_ok=True)
        self.primary.start()
        self.replica.start(replica_of=self.primary.port)
        for port in self.sentinel_ports:
            config = self.workdir / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.MASTER} 1000\n"
                f"sentinel failover-timeout {self.MASTER} 5000\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    ["redis-server", str(config), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=dies_with_us(),
                )
            )
        wait_for(self._settled, timeout=30, what="the sentinels to see the primary, its replica and each other")

    def primary_port(self) -> int | None:
        """The primary's port as the first sentinel that answers names it."""
        for port in self.sentinel_ports:
            answer = redis_command(port, "SENTINEL", "get-master-addr-by-name", self.MASTER)
            if isinstance(answer, list) and len(answer) == 2:
                return int(answer[1])
        return None

    def _settled(self) -> bool:
        for port in self.sentinel_ports:
            replicas = redis_command(port, "SENTINEL", "replicas", self.MASTER)
            others = redis_command(port, "SENTINEL", "sentinels", self.MASTER)
            if not isinstance(replicas, list) or len(replicas) != 1 or not isinstance(others, list) or len(others) != 2:
                return False
        return self.primary_port() == self.primary.port

    def close(self) -> None:
        for proc in self.sentinels:
            stop(proc, signal.SIGKILL)
        self.primary.close()
        self.replica.close()

    def __enter__(self):
        try:
            self.start()
        except BaseException:  # half started: what did start stops here, as __exit__ is not called
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()


def redis_command(port: int, *args: str):
    """One command to a Redis or sentinel on loopback, by redis-py; None if it does not answer."""
    import redis

    try:
        return redis.Redis(
            port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
        ).execute_command(*args)
    except redis.RedisError:
        return None
