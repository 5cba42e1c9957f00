"""Several hosts for real: the shop's production processes on N Linux network namespaces, one host killed.

``bin/cluster`` (root: it makes namespaces, veth pairs and a bridge) builds N application hosts, each a
network namespace with its own address on a bridge, and runs on each what docs/deploy.md says a host
runs: gunicorn on ``config.settings_production`` and a Celery worker, with beat on exactly one host.
MariaDB and a private Redis are reached at the bridge's address. A load driver spreads orders,
payments (a fake Stripe API, signed webhooks), cancels and unpaid orders left to expire over every
host; mid-load one host is killed whole (every process in it SIGKILLed) and beat is started on
another; later Redis is killed for a few seconds (the hosts sell under the stock rows' locks) and
restarted empty. At the end: 0 oversold, counters equal the ledger, reserved equals the active reservations,
every answer a client got matches the database, and the report goes to docs/cluster.md.

    bin/cluster [--hosts 3] [--seconds 60] [--drivers 6] [--report docs/cluster.md]

What it creates, and removes at the end (also on Ctrl-C, or when a step fails): the bridge
``shopbr0`` (10.77.0.1/24), namespaces ``shop-h1``..``shop-hN`` (10.77.0.11 ...), a redis-server on
10.77.0.1:6390, socat forwarding 10.77.0.1:3306 to MariaDB on 127.0.0.1:3306, the fake Stripe API
on 10.77.0.1:12111, the database ``shop_cluster`` (dropped at the start of the next run) and a
working directory under /tmp. Traffic goes only to those addresses and to loopback. Every wait is
bounded in time, every loop in count.
"""

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.client import HTTPException
from http.server import ThreadingHTTPServer
from multiprocessing import get_context
from pathlib import Path

from tests.processes import wait_for

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BRIDGE, GATEWAY = "shopbr0", "10.77.0.1"
REDIS_PORT, STRIPE_PORT, APP_PORT = 6390, 12111, 8000
DATABASE = "shop_cluster"
WEBHOOK_SECRET = "whsec_cluster_run_only"
RESERVATION_TTL = 20  # seconds an unpaid order holds its units: the run sees orders expire
REDIS_OUTAGE = 5  # seconds Redis is down, late in the load
HOT, MIXED = "HOT-1", [f"MIX-{n:02d}" for n in range(1, 21)]


def host_address(host: int) -> str:
    return f"10.77.0.{10 + host}"


def namespace(host: int) -> str:
    return f"shop-h{host}"


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (OSError, HTTPException):
        return False


# --- The hosts --------------------------------------------------------------------------------------


@dataclass
class Cluster:
    """The network, the shared services and the hosts' processes; ``close()`` removes all of it."""

    hosts: int
    workdir: Path
    links: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    services: list[subprocess.Popen] = field(default_factory=list)
    stripe: ThreadingHTTPServer | None = None

    def network_up(self) -> None:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.links.append(BRIDGE)
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for host in range(1, self.hosts + 1):
            ns, veth = namespace(host), f"shopv{host}"
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.links.append(veth)
            _run("ip", "link", "set", veth, "master", BRIDGE, "up")
            _run("ip", "-n", ns, "addr", "add", f"{host_address(host)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def services_up(self) -> None:
        """Redis on the bridge, MariaDB forwarded to it, the fake Stripe API beside them."""
        (self.workdir / "redis").mkdir()
        self.redis_start()
        self._service(["socat", f"TCP-LISTEN:3306,bind={GATEWAY},fork,reuseaddr", "TCP:127.0.0.1:3306"])
        from tests.stripe_fake import FakeStripe

        self.stripe = ThreadingHTTPServer((GATEWAY, STRIPE_PORT), FakeStripe)
        threading.Thread(target=self.stripe.serve_forever, daemon=True).start()

    def redis_start(self) -> None:
        """redis-server on the bridge (and loopback, for this script), empty: no persistence."""
        self.redis = self._service(
            ["redis-server", "--port", str(REDIS_PORT), "--bind", GATEWAY, "127.0.0.1", "--save", "", "--appendonly"]
            + ["no", "--protected-mode", "no", "--dir", str(self.workdir / "redis")]
        )
        wait_for(lambda: _port_open(GATEWAY, REDIS_PORT), timeout=10, what="redis-server")

    def redis_kill(self) -> None:
        """SIGKILL Redis: every lock, queue and sold-out mark gone; the hosts sell under row locks meanwhile."""
        os.killpg(self.redis.pid, signal.SIGKILL)
        self.redis.wait(30)

    def _service(self, command: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{Path(command[0]).name}.log", "a")  # noqa: SIM115 - kept open for the child
        self.services.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return self.services[-1]

    def env(self, host: int) -> dict:
        """A host's environment: production settings, the shared database and Redis, this host's address."""
        metrics = self.workdir / f"h{host}" / "metrics"
        metrics.mkdir(parents=True, exist_ok=True)
        return {
            "PATH": f"{BIN}:{os.environ['PATH']}",
            "DJANGO_SETTINGS_MODULE": "config.settings_production",
            "DATABASE_URL": f"mysql://root:@{GATEWAY}:3306/{DATABASE}",
            "REDIS_URL": f"redis://{GATEWAY}:{REDIS_PORT}/0",
            "SECRET_KEY": "cluster-run-only-" + "x" * 40,
            "ALLOWED_HOSTS": ",".join(host_address(n) for n in range(1, self.hosts + 1)),
            # Plain HTTP between the namespaces: no TLS proxy in front of these hosts.
            "SECURE_SSL_REDIRECT": "0",
            "SESSION_COOKIE_SECURE": "0",
            "CSRF_COOKIE_SECURE": "0",
            "SECURE_HSTS_SECONDS": "0",
            "PAYMENT_PROVIDER": "stripe",
            "STRIPE_SECRET_KEY": "sk_test_cluster",
            "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "STRIPE_API_BASE": f"http://{GATEWAY}:{STRIPE_PORT}",
            "EMAIL_URL": "dummymail://",
            "GUNICORN_BIND": f"{host_address(host)}:{APP_PORT}",
            "GUNICORN_WORKERS": "2",
            "PROMETHEUS_MULTIPROC_DIR": str(metrics),
            "ORDER_THROTTLE_RATE": "1000000/minute",
            "RESERVATION_TTL_SECONDS": str(RESERVATION_TTL),
            "EXPIRY_SWEEP_SECONDS": "2",
            "PAYMENT_EVENT_SWEEP_AFTER_SECONDS": "10",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "WARNING",
        }

    def start(self, host: int, *commands: str) -> None:
        """Start the named processes (``web``, ``worker``, ``beat``) on a host, as docs/deploy.md runs them."""
        lines = {
            "web": ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"],
            "worker": ["celery", "-A", "config", "worker", "--concurrency", "1", "--hostname", f"worker@h{host}"],
            "beat": ["celery", "-A", "config", "beat", "--schedule", str(self.workdir / "beat-schedule")],
        }
        env = self.env(host)  # makes the host's directory too
        for name in commands:
            log = open(self.workdir / f"h{host}" / f"{name}.log", "a")  # noqa: SIM115 - kept open for the child
            subprocess.Popen(
                ["ip", "netns", "exec", namespace(host), *lines[name]],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def manage(self, host: int, *args: str) -> None:
        """``manage.py`` run on a host (``migrate`` before the hosts start, as an upgrade does)."""
        command = ["ip", "netns", "exec", namespace(host), str(BIN / "python"), "manage.py", *args]
        subprocess.run(command, cwd=ROOT, env=self.env(host), check=True, capture_output=True, timeout=300)

    def ready(self, host: int) -> None:
        url = f"http://{host_address(host)}:{APP_PORT}/readyz"
        wait_for(lambda: _answers(url), timeout=90, what=f"host {host} to be ready ({url})")

    def kill(self, host: int) -> int:
        """SIGKILL every process in the host's namespace at once: the machine is gone. How many there were."""
        pids = self._pids(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not self._pids(host), timeout=30, what=f"host {host}'s processes to die")
        return len(pids)

    def _pids(self, host: int) -> list[int]:
        listed = subprocess.run(["ip", "netns", "pids", namespace(host)], capture_output=True, text=True, timeout=30)
        return [int(pid) for pid in listed.stdout.split()]

    def close(self) -> None:
        for host in range(1, self.hosts + 1):
            if namespace(host) in self.namespaces:
                self.kill(host)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        for link in reversed(self.links):
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        if self.stripe is not None:
            self.stripe.shutdown()
            self.stripe.server_close()
        for proc in self.services:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


# --- The load ---------------------------------------------------------------------------------------


class Client:
    """One driver's HTTP client over every host: requests go round the hosts; a host that refuses or drops
    a connection is left out from then on and the same request, with its same idempotency key, goes to
    the next (the truth of a request cut off mid-way is its replay's answer)."""

    def __init__(self, hosts: list[int], token: str):
        self.live = [f"http://{host_address(host)}:{APP_PORT}" for host in hosts]
        self.token, self.sent, self.failovers = token, 0, 0

    def send(self, method: str, path: str, *, body=None, key: str = "", headers=None) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
        for _ in range(4 * len(self.live) + 8):
            base = self.live[self.sent % len(self.live)]
            self.sent += 1
            request = urllib.request.Request(f"{base}{path}", data=data, method=method)
            request.add_header("Content-Type", "application/json")
            request.add_header("Authorization", f"Token {self.token}")
            if key:
                request.add_header("Idempotency-Key", key)
            for name, value in (headers or {}).items():
                request.add_header(name, value)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status, raw = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, raw = error.code, error.read()
            except (OSError, HTTPException):
                self.failovers += 1
                if len(self.live) > 1:
                    self.live.remove(base)
                time.sleep(0.1)
                continue
            if status == 503:  # busy or unreachable lock: the same request again, shortly
                time.sleep(0.1)
                continue
            try:
                return status, json.loads(raw or b"{}")
            except ValueError:
                return status, {"text": raw[:200].decode(errors="replace")}
        raise RuntimeError(f"{method} {path}: no host answered")


def drive(*, driver: int, hosts: list[int], token: str, seconds: float, currency: str) -> dict:
    """Place, pay, cancel or leave orders until ``seconds`` have passed; what each answer said."""
    from payments.providers.stripe import webhook_sign

    rng, client = random.Random(driver), Client(hosts, token)
    rng.shuffle(client.live)
    journal = {"placed": {}, "refused": [], "paid": [], "cancelled": [], "left": [], "errors": []}
    deadline, n = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        n += 1
        key = f"d{driver}-{n}"
        skus = [HOT] if rng.random() < 0.5 else rng.sample(MIXED, rng.randint(1, 3))
        items = [{"sku": sku, "quantity": 1 if sku == HOT else rng.randint(1, 2)} for sku in skus]
        status, answer = client.send("POST", "/api/orders/", body={"items": items}, key=key)
        if status == 409 and answer.get("code") == "insufficient_stock":
            journal["refused"].append(key)
            continue
        if status != 201:
            journal["errors"].append([key, status, answer])
            continue
        number = answer["number"]
        journal["placed"][key] = number
        fate = rng.random()
        if fate < 0.5:
            status, payment = client.send("POST", f"/api/orders/{number}/pay/")
            if status != 200:
                journal["errors"].append([number, status, payment])
                continue
            session = {
                "object": "checkout.session",
                "id": payment["reference"],
                "payment_status": "paid",
                "payment_intent": f"pi_{secrets.token_hex(8)}",
                "amount_total": round(float(payment["amount"]) * 100),
                "currency": currency.lower(),
            }
            event = {"id": f"evt_{number}", "object": "event", "type": "checkout.session.completed"}
            payload = json.dumps(event | {"data": {"object": session}}).encode()
            headers = {"Stripe-Signature": webhook_sign(payload, secret=WEBHOOK_SECRET)}
            status, body = client.send("POST", "/payments/stripe/webhook/", body=payload, headers=headers)
            if status == 200:
                journal["paid"].append(number)
            else:
                journal["errors"].append([number, status, body])
        elif fate < 0.7:
            retried = client.failovers
            status, body = client.send("POST", f"/api/orders/{number}/cancel/")
            # Cut off on a host that died, the first try may have cancelled it: the retry then finds it so.
            if status == 200 or (status == 409 and client.failovers > retried):
                journal["cancelled"].append(number)
            else:
                journal["errors"].append([number, status, body])
        else:
            journal["left"].append(number)
    journal["requests"], journal["failovers"] = client.sent, client.failovers
    return journal


# --- The run ----------------------------------------------------------------------------------------


def _setup_django() -> None:
    os.environ.update(
        DATABASE_URL=f"mysql://root:@127.0.0.1:3306/{DATABASE}",
        REDIS_URL=f"redis://127.0.0.1:{REDIS_PORT}/0",
        SECRET_KEY="cluster-run-only-" + "x" * 40,
        DJANGO_SETTINGS_MODULE="config.settings",
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()


def _fresh_database() -> None:
    import MySQLdb

    connection = MySQLdb.connect(host="127.0.0.1", port=3306, user="root", passwd="")
    cursor = connection.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
    cursor.execute(f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    connection.close()


def _catalog_and_buyers(drivers: int) -> list[str]:
    """The SKUs on sale (tickets: nothing shipped) and one buyer's API token per driver."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from inventory.variants import variant_create

    variant_create(sku=HOT, name="The drop", price="30.00", initial_stock=300, requires_shipping=False)
    for sku in MIXED:
        variant_create(sku=sku, name=f"Ticket {sku}", price="12.00", initial_stock=120, requires_shipping=False)
    users = get_user_model().objects
    return [
        AuthToken.objects.create(users.create_user(username=f"driver{n}", email=f"d{n}@example.com"))[1]
        for n in range(drivers)
    ]


def run(*, hosts: int, seconds: float, drivers: int) -> dict:
    """Build, load, kill host 1 at 40% of the load and Redis at 70%, check; everything removed after."""
    if os.geteuid() != 0:
        raise SystemExit("bin/cluster makes network namespaces and links: run it as root")
    for tool in ("ip", "socat", "redis-server"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bin/cluster needs {tool} (Debian: iproute2, socat, redis-server)")
    workdir = Path(tempfile.mkdtemp(prefix="shop-cluster-"))
    cluster = Cluster(hosts, workdir)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        cluster.network_up()
        cluster.services_up()
        _fresh_database()
        cluster.manage(1, "migrate", "--no-input")  # once, from one host, before any host serves
        _setup_django()
        from django.conf import settings
        from django.db import connections

        tokens = _catalog_and_buyers(drivers)
        connections.close_all()
        for host in range(1, hosts + 1):
            cluster.start(host, "web", "worker", *(["beat"] if host == 1 else []))
        for host in range(1, hosts + 1):
            cluster.ready(host)
        every = list(range(1, hosts + 1))
        jobs = [
            {"driver": n, "hosts": every, "token": tokens[n], "seconds": seconds, "currency": settings.SHOP_CURRENCY}
            for n in range(drivers)
        ]
        from orders.models import Order

        with get_context("fork").Pool(drivers) as pool:
            load_started = time.monotonic()
            load = pool.map_async(_drive_job, jobs)
            time.sleep(seconds * 0.4)
            killed_at = time.monotonic() - load_started
            killed_processes = cluster.kill(1)
            placed_before_kill = Order.all_objects.count()
            connections.close_all()
            cluster.start(2, "beat")  # the singleton moves: beat runs on host 2 from now on
            time.sleep(max(seconds * 0.7 - (time.monotonic() - load_started), 0))
            outage_at, placed_at_outage = time.monotonic() - load_started, Order.all_objects.count()
            cluster.redis_kill()
            time.sleep(REDIS_OUTAGE)
            placed_in_outage = Order.all_objects.count() - placed_at_outage
            connections.close_all()
            cluster.redis_start()
            journals = load.get(seconds + 600)
        outcome = _settle_and_check(journals)
        return {
            "hosts": hosts,
            "seconds": seconds,
            "drivers": drivers,
            "killed": {
                "host": 1,
                "at": round(killed_at, 1),
                "processes": killed_processes,
                "beat_to": 2,
                "placed_before": placed_before_kill,
            },
            "setup_seconds": round(load_started - started, 1),
            "redis_outage": {"at": round(outage_at, 1), "seconds": REDIS_OUTAGE, "placed": placed_in_outage},
            "journals": journals,
            **outcome,
        }
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _drive_job(job: dict) -> dict:
    from django.db import connections

    connections.close_all()
    return drive(**job)


def _port_open(address: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _settle_and_check(journals: list[dict]) -> dict:
    """Wait (bounded) for the paid orders to be paid and the left ones to expire, then check everything."""
    from django.db import connections

    from inventory.models import Reservation, StockMovement
    from inventory.selectors import stock_books
    from orders.models import Order

    connections.close_all()
    paid = {number for journal in journals for number in journal["paid"]}
    left = {number for journal in journals for number in journal["left"]}
    cancelled = {number for journal in journals for number in journal["cancelled"]}

    def status_of(numbers) -> Counter:
        return Counter(Order.all_objects.filter(number__in=numbers).values_list("status", flat=True))

    settle_started = time.monotonic()
    wait_for(lambda: status_of(paid) == Counter({"paid": len(paid)}), timeout=180, what="every paid order to be paid")
    wait_for(
        lambda: status_of(left) == Counter({"expired": len(left)}),
        timeout=RESERVATION_TTL + 120,
        what="every order left unpaid to expire",
    )
    settled = time.monotonic() - settle_started
    placed = {key: number for journal in journals for key, number in journal["placed"].items()}
    refused = [key for journal in journals for key in journal["refused"]]
    in_database = dict(Order.all_objects.values_list("idempotency_key", "number"))
    books = stock_books()
    received, taken = Counter(), Counter()
    for sku, units in StockMovement.objects.filter(kind__in=["restock", "adjust"]).values_list(
        "stock__variant__sku", "on_hand_delta"
    ):
        received[sku] += units
    for sku, units in Reservation.objects.filter(state__in=["active", "committed"]).values_list(
        "variant__sku", "quantity"
    ):
        taken[sku] += units
    return {
        "settled_seconds": round(settled, 1),
        "orders": {
            "placed": len(placed),
            "refused": len(refused),
            "paid": len(paid),
            "cancelled": len(cancelled),
            "left_to_expire": len(left),
        },
        "statuses": {"paid": status_of(paid), "cancelled": status_of(cancelled), "left": status_of(left)},
        "answers_match": in_database == placed and not set(refused) & set(in_database),
        "oversold": {sku: taken[sku] - received[sku] for sku in taken if taken[sku] > received[sku]},
        "drifted": [row.describe() for row in books if row.drifted],
        "skus": len(books),
        "errors": [error for journal in journals for error in journal["errors"]],
        "requests": sum(journal["requests"] for journal in journals),
        "failovers": sum(journal["failovers"] for journal in journals),
    }


def report(result: dict) -> list[str]:
    ok = (
        result["answers_match"]
        and not result["oversold"]
        and not result["drifted"]
        and not result["errors"]
        and result["statuses"]["cancelled"] == Counter({"cancelled": result["orders"]["cancelled"]})
        and result["redis_outage"]["placed"] > 0
    )
    killed, orders, outage = result["killed"], result["orders"], result["redis_outage"]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# Many hosts, one stock",
        "",
        f"Generated by `bin/cluster --hosts {result['hosts']} --seconds {result['seconds']:g} "
        f"--drivers {result['drivers']}` on {now}. **{'PASS' if ok else 'FAIL'}**.",
        "",
        "Each host is a Linux network namespace with its own address, running what docs/deploy.md says a host "
        "runs: gunicorn on `config.settings_production` (2 workers of 4 threads) and a Celery worker; beat on "
        "host 1. MariaDB and Redis are reached over the bridge. The load drivers send every request to the "
        "next host in turn; a host that drops a connection is left out and the same request (same "
        "idempotency key) goes to the next. Half the orders are for one hot SKU, half for 1-3 of 20 others; "
        "of those placed, half are paid (a checkout at the fake Stripe API, then its signed webhook), a fifth "
        "cancelled, the rest left to expire (reservations live "
        f"{RESERVATION_TTL} s, beat sweeps every 2 s).",
        "",
        "| | |",
        "|---|---|",
        f"| hosts | {result['hosts']} (+ MariaDB, Redis and the fake Stripe API on the bridge), built and "
        f"migrated in {result['setup_seconds']} s |",
        f"| load | {result['drivers']} driver processes for {result['seconds']:g} s, "
        f"{result['requests']:,} requests, {result['failovers']} sent again to another host |",
        f"| killed | host {killed['host']}, {killed['at']} s into the load: {killed['processes']} processes "
        f"SIGKILLed at once (its gunicorn, its worker, beat); beat started on host {killed['beat_to']}; "
        f"{orders['placed'] - killed['placed_before']:,} of the orders placed after it |",
        f"| Redis down | {outage['seconds']} s from {outage['at']} s into the load (SIGKILLed, restarted empty): "
        f"{outage['placed']:,} orders placed meanwhile, under the stock rows' locks |",
        f"| orders | {orders['placed']:,} placed, {orders['refused']:,} refused `insufficient_stock`, "
        f"{orders['paid']:,} paid, {orders['cancelled']:,} cancelled, {orders['left_to_expire']:,} left to expire |",
        f"| after the load | paid orders all `paid` and the left ones all `expired` within "
        f"{result['settled_seconds']} s |",
        f"| oversold | {sum(result['oversold'].values())} units ({len(result['oversold'])} SKUs) |",
        f"| books | {result['skus']} SKUs, {len(result['drifted'])} drifted (counters against the ledger, "
        "reserved against the active reservations) |",
        f"| answers | {'every' if result['answers_match'] else 'NOT every'} 201 names the order in the database "
        "under its key, and no refused key has one |",
        f"| errors | {len(result['errors'])} |",
        "",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--drivers", type=int, default=6)
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "cluster.md")
    args = parser.parse_args(argv)
    if args.hosts < 2:
        parser.error("--hosts: at least 2 (one is killed)")
    sys.path.insert(0, str(ROOT))
    result = run(hosts=args.hosts, seconds=args.seconds, drivers=args.drivers)
    lines = report(result)
    args.report.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if "**PASS**" in lines[2] else 1


if __name__ == "__main__":
    sys.exit(main())
