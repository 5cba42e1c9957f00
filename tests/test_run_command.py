"""README command 1 (bin/run): brings the shop up, says which mode it is in, serves the catalog."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_shop(env: dict) -> tuple[str, int]:
    """Start bin/run, wait for its URL line, fetch the catalog, stop it; return (output, HTTP status)."""
    port = free_port()
    env = {**env, "PORT": str(port), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.Popen(
        ["bash", "bin/run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            output.append(line)
            if "Shop running at" in line or proc.poll() is not None:
                break
        for _ in range(50):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    return "".join(output), response.status
            except OSError:
                time.sleep(0.2)
        return "".join(output), 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_with_nothing_configured_the_shop_runs_embedded(tmp_path):
    output, status = run_shop({"SQLITE_PATH": str(tmp_path / "shop.sqlite3"), "EMBEDDED_REDIS_PORT": str(free_port())})
    assert "Mode: embedded (SQLite file" in output
    assert "embedded Redis-compatible server" in output
    assert "Shop running at http://127.0.0.1:" in output
    assert status == 200
    assert (tmp_path / "shop.sqlite3").exists()


@pytest.mark.django_db(transaction=True)
def test_with_database_and_redis_urls_it_uses_mysql_and_redis():
    db = settings.DATABASES["default"]
    database_url = f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"
    output, status = run_shop({"DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL})
    assert f"Mode: configured (database at mysql://***@{db['HOST']}" in output
    assert f"Redis at {settings.REDIS_URL}" in output
    assert status == 200


def test_in_embedded_mode_the_lock_store_is_shared_by_every_process(tmp_path):
    """SQLite + the embedded server, 4 buyer processes: the service still sells exactly its stock."""
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "SECRET_KEY": settings.SECRET_KEY,
        "SQLITE_PATH": str(tmp_path / "shop.sqlite3"),
        "EMBEDDED_REDIS_PORT": str(port),
        "LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen([sys.executable, "-m", "config.embedded_redis", "--port", str(port)], cwd=ROOT, env=env)
    try:
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
        demo = subprocess.run(
            [*manage, "oversell_demo", "--strategy", "service", "--workers", "4", "--stock", "10", "--attempts", "40"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        server.terminate()
        server.wait(10)
    assert demo.returncode == 0, demo.stderr
    assert "sqlite database" in demo.stdout
    row = next(line for line in demo.stdout.splitlines() if line.startswith("service"))
    assert row.split() == ["service", "40", "10", "0", "0", "0", "correct"]
