"""``bin/run`` started from a test, as a newcomer starts it: its output, its URL, its files.

Shared by the tests of bin/run itself (``test_run_command``) and the walk through the embedded shop
(``test_embedded_walk``). A shop started here ends with the test run, however that run ends.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.processes import ROOT, dies_with_us, free_port


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/", timeout=5):
            return True
    except OSError:
        return False


@dataclass
class Shop:
    proc: subprocess.Popen
    url: str
    env: dict  # bin/run's environment
    lines: list[str]  # its output: up to "Shop running at" while it runs, all of it once stopped

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def var(self) -> Path:
        return Path(self.env["VAR_DIR"])


@contextmanager
def running_shop(env: dict):
    """bin/run until it prints its URL and serves there, then stopped (SIGTERM: it stops what it started).

    Its output is read all along (the web server logs every request to it: a pipe left unread would fill
    and stop the server), into ``Shop.lines``."""
    port = free_port()
    env = {**env, "PORT": str(port), "EVENTS_PORT": str(free_port()), "PATH": os.environ["PATH"]} | {
        "HOME": os.environ.get("HOME", "/root")
    }
    proc = subprocess.Popen(
        ["bash", "bin/run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=dies_with_us(),
    )
    shop = Shop(proc=proc, url=f"http://127.0.0.1:{port}", env=env, lines=[])
    reader = threading.Thread(target=lambda: shop.lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while "Shop running at" not in shop.output and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        while proc.poll() is None and not serves(shop.url) and time.monotonic() < deadline + 60:
            time.sleep(0.2)  # runserver starts after bin/run says so, slowly on a busy machine
        yield shop
    finally:
        with suppress(ProcessLookupError):  # gone already if bin/run stopped by itself
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        reader.join(10)
        print(shop.output)  # the shop's whole log, shown if the test fails


@contextmanager
def embedded_shop_started(var: Path, **env):
    """bin/run with nothing configured, its files in ``var`` and its Redis socket in a short temporary
    directory (a unix socket's path must be short); ``env`` adds to bin/run's environment."""
    redis_dir = Path(tempfile.mkdtemp(prefix="shop-redis-"))
    try:
        with running_shop({"VAR_DIR": str(var), "EMBEDDED_REDIS_DIR": str(redis_dir), **env}) as shop:
            yield shop
    finally:
        shutil.rmtree(redis_dir, ignore_errors=True)


def fetch(url: str) -> tuple[int, str, bytes]:
    """GET: (status, Content-Type, body), for errors as well."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def manage(shop_env: dict, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """`.venv/bin/python manage.py ARGS` as the README gives it, in a shell where nothing is set: no SECRET_KEY,
    no DEBUG, no store URLs; only where this test keeps bin/run's files instead of var/ (and ``env``)."""
    bare = {name: shop_env[name] for name in ("PATH", "HOME", "VAR_DIR", "EMBEDDED_REDIS_DIR")} | env
    return subprocess.run(
        [".venv/bin/python", "manage.py", *args],
        cwd=ROOT,
        env=bare,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=dies_with_us(),
    )
