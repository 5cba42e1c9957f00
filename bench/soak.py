"""Soak: minutes of mixed traffic from several processes while the books are checked every few seconds.

    python -m bench.soak [--minutes 10] [--workers 6] [--skus 60]    (bin/soak sets the defaults up)

Not a CI test: it finds what only shows after thousands of interleavings. Worker processes place
orders (1 to 3 SKUs, a few hot SKUs and many cold ones, now and then a quantity that must be
refused), replay Idempotency-Keys, pay (some cards declined), fail payments, cancel, expire, and
adjust stock as staff, all through the real services. Sweeper processes run the expiry and
failed-payment sweeps and the payment sweep (what Celery beat runs; no Celery worker runs here, so
the sweep is also what releases failed payments). A checker process reads the books in one snapshot
every few seconds. Meanwhile faults are injected, each kind ``--fault-rounds`` times: the soak's Redis
server is killed and restarted (every lock gone), a worker process is SIGKILLed, a sweeper is
SIGKILLed (each replaced by a fresh one), and a worker holding a SKU's lock is SIGSTOPped past the
lock's TTL, then resumed. At the end the workers stop, the last reservations expire and are swept,
and a final check must find every order settled and nothing reserved. The report goes to
docs/soak.md; the exit status is 1 on any drift, oversell, mismatch, unexpected exception or fault
that could not be injected.

Oversell is counted twice against the units put in (restock and adjustment ledger rows): from the
rows (active and committed reservations, every check) and from the answers (units of the orders
callers were told are paid, at the end). Neither is bounded by the CHECK on the counters.

Workers journal what they were told (and what they had in flight) to a file as they go, so a killed
worker's answers still count.

It runs in a database of its own (``<DATABASE_URL name>_soak``, dropped and migrated afresh) and a
redis-server of its own, started on a free port and restarted by the faults, with lock keys under
``soak``.
"""

import argparse
import atexit
import json
import logging
import multiprocessing
import os
import platform
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import environ
import MySQLdb
import redis

ROOT = Path(__file__).resolve().parent.parent


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="traffic time; fractions are fine")
    parser.add_argument("--workers", type=int, default=6, help="traffic processes")
    parser.add_argument("--sweepers", type=int, default=2, help="sweeper processes (they share work, SKIP LOCKED)")
    parser.add_argument("--skus", type=int, default=60, help="products, of which --hot are hot")
    parser.add_argument("--hot", type=int, default=4)
    parser.add_argument("--ttl", type=int, default=10, help="RESERVATION_TTL_SECONDS for the run")
    parser.add_argument("--sweep-every", type=float, default=2.0, help="seconds between a sweeper's passes")
    parser.add_argument("--lease", type=float, default=10.0, help="SWEEP_LEASE_SECONDS for the run")
    parser.add_argument("--check-every", type=float, default=3.0, help="seconds between book checks")
    parser.add_argument("--pause", type=float, default=0.01, help="mean think time between a worker's operations")
    parser.add_argument("--fault-rounds", type=int, default=2, help="times each kind of fault is injected")
    parser.add_argument("--redis-down", type=float, default=2.0, help="seconds Redis stays down in a restart")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "soak.md")
    args = parser.parse_args()
    if args.workers < 1 or args.sweepers < 1 or not 1 <= args.hot < args.skus or args.minutes <= 0:
        parser.error("need workers >= 1, sweepers >= 1, 1 <= hot < skus and minutes > 0")
    return args


class RedisServer:
    """The soak's own redis-server (no persistence) on a free port: the faults kill and restart it, and
    that touches no one else's Redis."""

    def __init__(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.workdir = tempfile.mkdtemp(prefix="soak-redis-")
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", self.workdir],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError("the soak's redis-server did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        """A crash (SIGKILL): every key, so every lock and queued request, is gone."""
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _answers(self) -> bool:
        try:
            return redis.Redis(port=self.port, socket_timeout=1).ping()
        except redis.RedisError:
            return False


REDIS = RedisServer() if __name__ == "__main__" else None
PAYMENT_SETTLE_AFTER = 20  # seconds: a killed payer's charge is settled by the payment sweep within the run


def _use_soak_services(args) -> None:
    """Before ``django.setup()``: a fresh ``<name>_soak`` database, our own Redis server, run settings."""
    url = os.environ.get("DATABASE_URL", "mysql://root:@127.0.0.1:3306/shop")
    if not url.startswith("mysql"):
        raise SystemExit("The soak runs on MySQL/MariaDB: set DATABASE_URL=mysql://...")
    config = environ.Env.db_url_config(url)
    name = config["NAME"] if config["NAME"].endswith("_soak") else f"{config['NAME']}_soak"
    server = MySQLdb.connect(
        host=config["HOST"] or "127.0.0.1",
        port=int(config["PORT"] or 3306),
        user=config["USER"],
        passwd=config["PASSWORD"],
    )
    server.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
    server.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    server.close()
    REDIS.start()
    atexit.register(REDIS.stop)
    os.environ.update(
        DATABASE_URL=url.rsplit("/", 1)[0] + "/" + name,
        REDIS_URL=REDIS.url,
        CELERY_BROKER_URL=REDIS.url,  # failed payments enqueue their release; nobody consumes it
        LOCK_KEY_PREFIX="soak",
        RESERVATION_TTL_SECONDS=str(args.ttl),
        EXPIRY_SWEEP_SECONDS=str(args.sweep_every),
        SWEEP_LEASE_SECONDS=str(args.lease),
        PAYMENT_SETTLE_AFTER_SECONDS=str(PAYMENT_SETTLE_AFTER),
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "soak-only-not-a-secret")
    os.environ.setdefault("LOG_LEVEL", "WARNING")


# Imported rather than run (``books_check`` from a shell, on a soak database left behind): no set-up.
ARGS = _arguments() if __name__ == "__main__" else None
if ARGS:
    _use_soak_services(ARGS)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.db.models import Count, Max, Min, Sum  # noqa: E402
from django.utils import timezone  # noqa: E402

import inventory.services  # noqa: E402
from core.errors import DomainError  # noqa: E402
from inventory.models import Reservation, Stock, StockMovement  # noqa: E402
from inventory.selectors import stock_books  # noqa: E402
from inventory.services import stock_adjust, stock_restock  # noqa: E402
from orders.models import Order, OrderLine, Payment, PaymentEvent  # noqa: E402
from orders.payments import local_event, webhook_event_verify, webhook_sign  # noqa: E402
from orders.selectors import order_list_final_holding_stock, order_list_overdue  # noqa: E402
from orders.services import (  # noqa: E402
    order_cancel,
    order_expire,
    order_fail_payment,
    order_pay,
    order_place,
    order_release_expired,
    order_release_failed_payments,
    payment_event_process,
    payment_event_receive,
    payment_list_settle,
)
from orders.webhooks import LOCAL_OUTCOMES  # noqa: E402
from shop.models import Product  # noqa: E402

Status = Order.Status
Kind = StockMovement.Kind

# Per worker operation: how often it is picked. Orders nobody pays or cancels are left to expire.
OPERATIONS = {
    "place": 40,
    "replay": 6,
    "replay_other_body": 2,
    "pay": 18,
    "fail_payment": 5,
    "cancel": 6,
    "expire": 3,
    "staff_cancel": 2,
    "restock": 4,
    "adjust_delta": 4,
    "adjust_below_reserved": 2,
    "adjust_set": 3,
}
DECLINE_RATE = 0.15
SOAK_RETURN_URL = "http://soak.invalid/"


def _webhook(event: dict) -> None:
    """The local provider's webhook for ``event``, signed, verified, stored and processed as the shop's
    endpoint and its task do (no web server or Celery worker runs in the soak)."""
    payload = json.dumps(event).encode()
    verified = webhook_event_verify(payload, webhook_sign(payload, secret=settings.STRIPE_WEBHOOK_SECRET))
    payment_event_receive(provider="stripe", event=verified)
    payment_event_process(event=PaymentEvent.objects.get(event_id=verified["id"]))


STOCK_START = {"hot": 40, "cold": 20}
STOCK_CAP = {"hot": 200, "cold": 60}  # restocks turn into reductions above this, so stock stays scarce


class SoakAnomaly(Exception):
    """A service answered something it must not (a replay giving another order, say): fails the run."""


# Until when (time.monotonic(), the same clock in every process) the shop's warnings and errors are a
# fault's doing: set by the fault injector to the fault's end plus the time its effects may last.
FAULT_UNTIL = multiprocessing.get_context("fork").Value("d", 0.0, lock=False)


class Journal:
    """Lines appended to a file as they happen (one write each), so a killed process's record survives."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *fields) -> None:
        os.write(self.fd, ("\t".join(map(str, fields)) + "\n").encode())


class Tally:
    """What one process saw: operations by kind and outcome, refusals by code, surprises."""

    def __init__(self, role: str, journal: Journal | None = None):
        self.role = role
        self.journal = journal
        self.ops = Counter()
        self.refusals = Counter()
        self.unexpected = Counter()
        self.samples: dict[str, str] = {}  # the first traceback of each unexpected exception
        self.slowest: dict[str, float] = defaultdict(float)
        self.logged = Counter()
        self.logged_in_fault = Counter()  # logged while a fault or its aftermath lasted

    def run(self, kind: str, func) -> None:
        began, how = time.monotonic(), "ok"
        try:
            outcome = func()
        except DomainError as exc:
            outcome, how = exc.code, "refused"
            self.refusals[exc.code] += 1
        except Exception as exc:
            name = type(exc).__name__
            outcome, how = f"UNEXPECTED {name}", "unexpected"
            self.unexpected[name] += 1
            self.samples.setdefault(name, f"{self.role}, {kind}:\n{_where(exc)}")
            print(f"UNEXPECTED in {self.role}, {kind}: {name}: {exc}", file=sys.stderr, flush=True)
            connections.close_all()  # whatever state it left, start the next operation clean
        if outcome is None:  # nothing to act on yet
            return
        if self.journal:
            self.journal.write("op", kind, outcome, how)
        self.ops[(kind, outcome)] += 1
        self.slowest[kind] = max(self.slowest[kind], time.monotonic() - began)


def _where(exc: Exception) -> str:
    """The project's frames of an exception and its message (library frames left out)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if "site-packages" not in frame.filename]
    text = "".join(traceback.format_list(frames) + traceback.format_exception_only(exc))
    return text.replace(f"{ROOT}/", "")


def _count_logs(tally: Tally) -> None:
    """Count the warnings and errors the shop logs in this process, by logger and message template."""
    handler = logging.Handler(level=logging.WARNING)

    def emit(record):
        during_fault = time.monotonic() < FAULT_UNTIL.value
        (tally.logged_in_fault if during_fault else tally.logged).update(
            [(record.levelname, record.name, str(record.msg))]
        )

    handler.emit = emit
    logging.getLogger().addHandler(handler)


# --- Traffic ----------------------------------------------------------------------------------


@dataclass
class Placed:
    pk: int
    key: str
    items: list[dict]
    at: float  # time.monotonic() when placed


@dataclass
class WorkerResult:
    """What a worker was told, read back from its journal."""

    tally: Tally
    placed: set[int] = field(default_factory=set)
    items: dict[int, list[dict]] = field(default_factory=dict)  # what each placed order asked for
    paid: set[int] = field(default_factory=set)
    unsure_keys: set[str] = field(default_factory=set)  # places whose outcome the caller could not know
    unsure_paid: set[int] = field(default_factory=set)  # payments whose outcome the caller could not know


def _read_journal(path: Path, tally: Tally | None) -> WorkerResult:
    """A worker's answers from its journal. ``tally`` is None for a killed worker: its operations are
    counted from the journal (no timings) and the one it had in flight has an unknown outcome."""
    rebuilt = Tally(f"killed worker {path.name}")
    result = WorkerResult(tally or rebuilt)
    in_flight = None
    for line in path.read_text().split("\n")[:-1]:  # a line cut by the kill has no newline
        kind, *fields = line.split("\t")
        if kind == "try":
            in_flight = ("place", fields[0])
        elif kind == "pay":
            in_flight = ("pay", int(fields[0]))
        elif kind == "placed":
            result.placed.add(int(fields[0]))
            result.items[int(fields[0])] = json.loads(fields[2])
        elif kind == "paid":
            result.paid.add(int(fields[0]))
        elif kind == "unsure":
            result.unsure_keys.add(fields[0])
        elif kind == "unsure_pay":
            result.unsure_paid.add(int(fields[0]))
        elif kind == "op":
            in_flight = None
            operation, outcome, how = fields
            rebuilt.ops[(operation, outcome)] += 1
            if how == "refused":
                rebuilt.refusals[outcome] += 1
            elif how == "unexpected":
                rebuilt.unexpected[outcome.removeprefix("UNEXPECTED ")] += 1
    if tally is None and in_flight:
        kind, what = in_flight
        (result.unsure_keys if kind == "place" else result.unsure_paid).add(what)
    return result


class Worker:
    def __init__(self, number: int, skus: dict[str, list[str]], staff_id: int, journal: Journal):
        self.rng = random.Random(ARGS.seed * 1000 + number)
        self.email = f"soak{number}@example.com"
        self.skus = skus
        self.staff = get_user_model().objects.get(pk=staff_id)
        self.mine: list[Placed] = []
        self.journal = journal
        self.tally = Tally(f"worker {number}", journal)

    def run(self, deadline: float) -> Tally:
        kinds, weights = list(OPERATIONS), list(OPERATIONS.values())
        while time.monotonic() < deadline:
            kind = self.rng.choices(kinds, weights)[0]
            self.tally.run(kind, getattr(self, kind))
            if ARGS.pause:
                time.sleep(self.rng.expovariate(1 / ARGS.pause))
        return self.tally

    # Orders ---------------------------------------------------------------------------------

    def _items(self) -> list[dict]:
        count = self.rng.choices([1, 2, 3], [60, 25, 15])[0]
        skus = set()
        while len(skus) < count:
            skus.add(self.rng.choice(self.skus["hot" if self.rng.random() < 0.5 else "cold"]))
        items = []
        for sku in skus:
            roll = self.rng.random()
            if roll < 0.005:
                quantity = settings.MAX_LINE_QUANTITY + 1  # invalid_quantity
            elif roll < 0.03:
                quantity = settings.MAX_LINE_QUANTITY  # more than any SKU holds: insufficient_stock
            else:
                quantity = self.rng.randint(1, 3)
            items.append({"sku": sku, "quantity": quantity})
        return items

    def place(self):
        items, key = self._items(), uuid.uuid4().hex
        self.journal.write("try", key)
        try:
            order = order_place(email=self.email, items=items, idempotency_key=key)
        except DomainError as exc:
            if exc.code == "lock_timeout":
                self.journal.write("unsure", key)
            raise
        except Exception:
            self.journal.write("unsure", key)
            raise
        self.journal.write("placed", order.pk, key, json.dumps(items))
        self.mine = [*self.mine[-399:], Placed(order.pk, key, items, time.monotonic())]
        return "placed"

    def replay(self):
        """The same key and body (lines shuffled) must give the same order, whatever happened to it since."""
        if not self.mine:
            return None
        placed = self.rng.choice(self.mine)
        items = self.rng.sample(placed.items, len(placed.items))
        order = order_place(email=self.email, items=items, idempotency_key=placed.key)
        if order.pk != placed.pk:
            raise SoakAnomaly(f"key {placed.key} placed order {placed.pk}, its replay answered order {order.pk}")
        return "same order"

    def replay_other_body(self):
        if not self.mine:
            return None
        placed = self.rng.choice(self.mine)
        items = [dict(placed.items[0], quantity=placed.items[0]["quantity"] % 3 + 1), *placed.items[1:]]
        order = order_place(email=self.email, items=items, idempotency_key=placed.key)  # idempotency_conflict
        raise SoakAnomaly(f"key {placed.key} reused with another body gave order {order.pk}, not a conflict")

    def _pick(self, overdue_share: float) -> Order | None:
        """One of our orders: within its reservation (likely unpaid) or, at ``overdue_share``, one past it."""
        cutoff = time.monotonic() - ARGS.ttl
        overdue = self.rng.random() < overdue_share
        return self._load([placed for placed in self.mine if (placed.at < cutoff) == overdue])

    def _load(self, pool: list[Placed]) -> Order | None:
        if not pool:
            return None
        return Order.objects.prefetch_related("lines__product").filter(pk=self.rng.choice(pool).pk).first()

    def pay(self):
        if (order := self._pick(overdue_share=0.3)) is None:  # an expired order is reserved again if it can be
            return None
        before = order.status
        declined = self.rng.random() < DECLINE_RATE
        self.journal.write("pay", order.pk)
        try:
            payment = order_pay(order=order, return_url=SOAK_RETURN_URL)
            if payment.state == Payment.State.PENDING:
                _webhook(local_event(LOCAL_OUTCOMES["decline" if declined else "pay"], payment=payment))
        except DomainError:  # refused: nothing was paid
            raise
        except Exception:
            self.journal.write("unsure_pay", order.pk)
            raise
        paid = Order.all_objects.get(pk=order.pk)
        payment.refresh_from_db()
        if paid.status == Status.PAID:
            self.journal.write("paid", paid.pk)
            return "paid" if before == Status.AWAITING_PAYMENT else f"paid (was {before})"
        if payment.state == Payment.State.CAPTURED:
            raise SoakAnomaly(f"order {paid.pk} is {paid.status} with its payment captured")
        return f"payment {payment.state} (order {paid.status})"

    def fail_payment(self):
        if (order := self._pick(overdue_share=0.15)) is None:
            return None
        return "failed" if order_fail_payment(order=order) else "not awaiting payment"

    def cancel(self):
        if (order := self._pick(overdue_share=0.15)) is None:
            return None
        return self._cancel(order)

    def staff_cancel(self):
        """Staff cancel any customer's unpaid order (the admin action), racing its owner's payment."""
        top = Order.objects.aggregate(top=Max("pk"))["top"]
        if top is None:
            return None
        order = (
            Order.objects.filter(pk__gte=self.rng.randint(1, top), status=Status.AWAITING_PAYMENT)
            .order_by("pk")
            .prefetch_related("lines__product")
            .first()
        )
        return None if order is None else self._cancel(order)

    @staticmethod
    def _cancel(order: Order) -> str:
        before = order.status
        cancelled = order_cancel(order=order)
        if cancelled.status != Status.CANCELLED:
            raise SoakAnomaly(f"order_cancel returned order {cancelled.pk} as {cancelled.status}")
        return "cancelled" if before == Status.AWAITING_PAYMENT else f"cancelled (was {before})"

    def expire(self):
        """Expire one of our orders that has just become overdue ourselves, racing the sweepers."""
        cutoff = time.monotonic() - ARGS.ttl
        if (order := self._load([p for p in self.mine if cutoff - 2 * ARGS.sweep_every < p.at < cutoff])) is None:
            return None
        return "expired" if order_expire(order=order) else "not due or settled"

    # Staff ----------------------------------------------------------------------------------

    def _stock(self) -> tuple[str, str, Stock]:
        temperature = "hot" if self.rng.random() < 0.6 else "cold"
        sku = self.rng.choice(self.skus[temperature])
        return sku, temperature, Stock.objects.get(product__sku=sku)

    def restock(self):
        sku, temperature, stock = self._stock()
        if stock.on_hand >= STOCK_CAP[temperature]:
            stock_adjust(sku=sku, delta=-self.rng.randint(1, 10), reason="soak: shrinkage", actor=self.staff)
            return "reduced (over cap)"
        stock_restock(sku=sku, quantity=self.rng.randint(5, 30), reason="soak: delivery", actor=self.staff)
        return "restocked"

    def adjust_delta(self):
        sku, temperature, stock = self._stock()
        delta = self.rng.randint(-5, 10) or 1
        if stock.on_hand + delta > STOCK_CAP[temperature]:
            delta = -abs(delta)
        stock_adjust(sku=sku, delta=delta, reason="soak: count", actor=self.staff)
        return "added" if delta > 0 else "removed"

    def adjust_below_reserved(self):
        """Take away one unit more than is available: refused unless an order let go meanwhile."""
        sku, _, stock = self._stock()
        stock_adjust(sku=sku, delta=-(stock.available + 1), reason="soak: too much", actor=self.staff)
        return "applied (stock freed meanwhile)"

    def adjust_set(self):
        """The admin form: set on hand to a count, compare-and-set on the version the form was loaded with."""
        sku, temperature, stock = self._stock()
        target = min(max(stock.on_hand + self.rng.randint(-3, 10), 0), STOCK_CAP[temperature])
        stock_adjust(sku=sku, set_to=target, expected_version=stock.version, reason="soak: form", actor=self.staff)
        return "set"


def _worker(number, skus, staff_id, deadline, journal_path, pause, out):
    connections.close_all()  # never share the parent's socket
    worker = Worker(number, skus, staff_id, Journal(journal_path))
    _count_logs(worker.tally)
    _stop_when_asked(pause)
    out.put(("worker", number, worker.run(deadline)))
    connections.close_all()


def _stop_when_asked(pause) -> None:
    """The paused-holder fault: once the injector sets ``pause`` to 1, the first worker to reach a one-SKU
    reservation's guarded UPDATE (holding that SKU's lock, before writing) puts its pid there and
    SIGSTOPs itself; the injector resumes it after the lock's TTL."""
    write = inventory.sql.stock_reserve

    def stop_then_write(*, product_id, quantity):
        with pause.get_lock():
            chosen = pause.value == 1
            if chosen:
                pause.value = os.getpid()
        if chosen:
            os.kill(os.getpid(), signal.SIGSTOP)
        return write(product_id=product_id, quantity=quantity)

    inventory.sql.stock_reserve = stop_then_write


# --- Sweeps -----------------------------------------------------------------------------------


@dataclass
class SweepTotals:
    passes: int = 0
    done: Counter = field(default_factory=Counter)
    units: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)

    def add(self, name: str, result) -> str:
        self.done[name] += result.done
        self.units[name] += result.units
        self.skipped[name] += len(result.skipped)
        return "released some" if result.done else "nothing to do"

    def settle(self) -> str:
        settled = payment_list_settle(older_than=timedelta(seconds=settings.PAYMENT_SETTLE_AFTER_SECONDS))
        self.done["charges settled"] += settled
        return "settled some" if settled else "nothing to do"


def _sweep_once(tally: Tally, totals: SweepTotals) -> None:
    """What the beat tasks run (orders.tasks.sweep_expired_orders / sweep_failed_payments / settle_payments)."""
    batch = settings.SWEEP_BATCH_SIZE
    tally.run("sweep_expired", lambda: totals.add("expired", order_release_expired(batch_size=batch)))
    tally.run("sweep_failed_payments", lambda: totals.add("failed", order_release_failed_payments(batch_size=batch)))
    tally.run("settle_payments", lambda: totals.settle())
    totals.passes += 1


def _sweeper(number, deadline, out):
    connections.close_all()
    tally, totals = Tally(f"sweeper {number}"), SweepTotals()
    _count_logs(tally)
    time.sleep(number * ARGS.sweep_every / ARGS.sweepers)  # spread the sweepers over the interval
    while time.monotonic() < deadline:
        began = time.monotonic()
        _sweep_once(tally, totals)
        time.sleep(max(0.0, ARGS.sweep_every - (time.monotonic() - began)))
    out.put(("sweeper", number, (tally, totals)))
    connections.close_all()


# --- The books --------------------------------------------------------------------------------


@dataclass
class Check:
    at: float  # seconds since the traffic started
    seconds: float  # how long the check took
    skus: int
    drifted: list[str]  # stock_books rows whose counters disagree with the ledger or the reservations
    negative: list[str]  # on_hand < 0, reserved < 0 or reserved > on_hand
    oversold: int  # units held or sold (active and committed reservation rows) beyond the units put in
    mismatched: list[str]  # on hand != put in - sold, or committed reservations != paid lines
    stuck: list[str]  # final orders holding stock (payment-failed ones only past the grace)
    pending: int  # payment-failed orders within the grace, their release not swept yet
    oldest_pending: float  # seconds
    overdue: int  # unpaid orders past expiry, not swept yet
    sweep_lag: float  # seconds the oldest of them is overdue
    reserved: int
    open_orders: int

    def summary(self) -> str:
        return (
            f"drift {len(self.drifted)}, negative {len(self.negative)}, oversold {self.oversold}, mismatched "
            f"{len(self.mismatched)}, stuck {len(self.stuck)}, pending failed {self.pending}, open {self.open_orders}, "
            f"overdue {self.overdue} (lag {self.sweep_lag:.1f} s), reserved {self.reserved}, took {self.seconds:.2f} s"
        )

    @property
    def clean(self) -> bool:
        return not (self.drifted or self.negative or self.oversold or self.mismatched or self.stuck)


def _per_sku(queryset, sku_field: str, value_field: str) -> Counter:
    rows = queryset.values(sku_field).annotate(total=Sum(value_field)).values_list(sku_field, "total")
    return Counter({sku: total for sku, total in rows})


def books_check(*, at: float, grace: float) -> Check:
    """Everything read in one REPEATABLE READ snapshot, so rows written by one commit agree."""
    began = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    with transaction.atomic():
        now = timezone.now()
        books = stock_books()
        put_in = _per_sku(
            StockMovement.objects.filter(kind__in=[Kind.RESTOCK, Kind.ADJUST]), "stock__product__sku", "on_hand_delta"
        )
        sold = _per_sku(OrderLine.all_objects.filter(order__status=Status.PAID), "product__sku", "quantity")
        committed = _per_sku(Reservation.objects.filter(state=Reservation.State.COMMITTED), "product__sku", "quantity")
        taken = _per_sku(
            Reservation.objects.filter(state__in=[Reservation.State.ACTIVE, Reservation.State.COMMITTED]),
            "product__sku",
            "quantity",
        )
        holding = list(order_list_final_holding_stock().values_list("number", "status", "updated_at"))
        overdue = order_list_overdue().aggregate(count=Count("pk"), oldest=Min("expires_at"))
        open_orders = Order.all_objects.filter(status=Status.AWAITING_PAYMENT).count()
    stuck, pending_ages = [], []
    for number, status, updated_at in holding:
        age = (now - updated_at).total_seconds()
        if status == Status.PAYMENT_FAILED and age <= grace:
            pending_ages.append(age)
        else:
            stuck.append(f"{number} ({status}, {age:.1f} s)")
    return Check(
        at=at,
        seconds=time.monotonic() - began,
        skus=len(books),
        drifted=[row.describe() for row in books if row.drifted],
        negative=[row.sku for row in books if row.on_hand < 0 or row.reserved < 0 or row.reserved > row.on_hand],
        oversold=sum(max(0, taken[row.sku] - put_in[row.sku]) for row in books),
        mismatched=[
            f"{row.sku}: on hand {row.on_hand}, put in {put_in[row.sku]}, paid {sold[row.sku]}, "
            f"committed {committed[row.sku]}"
            for row in books
            if row.on_hand != put_in[row.sku] - sold[row.sku] or committed[row.sku] != sold[row.sku]
        ],
        stuck=stuck,
        pending=len(pending_ages),
        oldest_pending=max(pending_ages, default=0.0),
        overdue=overdue["count"],
        sweep_lag=(now - overdue["oldest"]).total_seconds() if overdue["oldest"] else 0.0,
        reserved=sum(row.reserved for row in books),
        open_orders=open_orders,
    )


def _grace() -> float:
    """How long a payment-failed order may hold its stock here: a sweep that skipped it leases it first."""
    return ARGS.lease + 3 * ARGS.sweep_every


def _checker(started, deadline, out):
    connections.close_all()
    tally, checks = Tally("checker"), []
    _count_logs(tally)

    def check():
        checks.append(books_check(at=time.monotonic() - started, grace=_grace()))
        last = checks[-1]
        _say_check(started, f"check {len(checks)}", last)
        return "clean" if last.clean else "PROBLEM"

    while time.monotonic() < deadline:
        began = time.monotonic()
        tally.run("book_check", check)
        time.sleep(max(0.0, ARGS.check_every - (time.monotonic() - began)))
    out.put(("checker", 0, (tally, checks)))
    connections.close_all()


def _say(started: float, message: str) -> None:
    print(f"[{(time.monotonic() - started) / 60:5.2f} min] {message}", file=sys.stderr, flush=True)


def _say_check(started: float, label: str, check: Check) -> None:
    _say(started, f"{label}: {check.summary()}")
    for problem in check.drifted + check.negative + check.mismatched + check.stuck:
        _say(started, f"  PROBLEM {problem}")


# --- Set-up, run, wind-down -------------------------------------------------------------------


def catalog() -> tuple[dict[str, list[str]], int]:
    """Products with opening stock put in through the service (so the ledger has it), and a staff user."""
    call_command("migrate", verbosity=0)
    staff = get_user_model().objects.create_user("soak-staff", password=None, is_staff=True)
    rng = random.Random(ARGS.seed)
    skus = {
        "hot": [f"SOAK-HOT-{n}" for n in range(ARGS.hot)],
        "cold": [f"SOAK-{n:04d}" for n in range(ARGS.skus - ARGS.hot)],
    }
    for temperature, names in skus.items():
        for sku in names:
            Product.objects.create(sku=sku, name=f"Soak {sku}", price=rng.randint(1, 50))
            stock_restock(sku=sku, quantity=STOCK_START[temperature], reason="soak: opening stock", actor=staff)
    return skus, staff.pk


@dataclass
class Fault:
    kind: str
    at: float  # seconds since the traffic started
    seconds: float  # how long it lasted
    detail: str
    injected: bool


FAULT_KINDS = {
    "redis_restart": "the soak's redis-server SIGKILLed (every lock and queued request gone), restarted empty",
    "kill_web": "a worker process (the web side: places, pays, cancels) SIGKILLed mid-traffic, a fresh one started",
    "pause_holder": "a worker holding a SKU's lock SIGSTOPped before its guarded UPDATE, past the lock's TTL",
    "kill_sweeper": "a sweeper process (the Celery worker's part) SIGKILLed, a fresh one started",
}


class Run:
    """The soak's processes, started and replaced here, and the faults done to them."""

    def __init__(self, skus, staff_id):
        self.ctx = multiprocessing.get_context("fork")
        self.skus, self.staff_id = skus, staff_id
        self.out = self.ctx.Queue()
        self.pause = self.ctx.Value("i", 0)  # 1: stop the next holder; then the stopped worker's pid
        self.journals = Path(tempfile.mkdtemp(prefix="soak-journals-"))
        self.workers: dict[int, multiprocessing.Process] = {}
        self.sweepers: dict[int, multiprocessing.Process] = {}
        self.killed: set[int] = set()  # pids the faults killed: they report nothing
        self.faults: list[Fault] = []
        self.rng = random.Random(ARGS.seed)
        # A fault's effects last until the locks it left behind expire and their waiters give up.
        self.aftermath = settings.LOCK_TTL_SECONDS + settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS

    def _start(self, target, *args) -> multiprocessing.Process:
        proc = self.ctx.Process(target=target, args=args)
        proc.start()
        return proc

    def start_worker(self) -> int:
        number = len(self.workers)
        self.workers[number] = self._start(
            _worker,
            number,
            self.skus,
            self.staff_id,
            self.deadline,
            self.journals / f"worker-{number}",
            self.pause,
            self.out,
        )
        return number

    def start_sweeper(self) -> int:
        number = len(self.sweepers)
        self.sweepers[number] = self._start(_sweeper, number, self.deadline, self.out)
        return number

    def run(self) -> dict:
        connections.close_all()
        self.started = time.monotonic()
        self.deadline = self.started + ARGS.minutes * 60
        for _ in range(ARGS.workers):
            self.start_worker()
        for _ in range(ARGS.sweepers):
            self.start_sweeper()
        checker = self._start(_checker, self.started, self.deadline, self.out)
        self.inject_faults()
        return self.collect([*self.workers.values(), *self.sweepers.values(), checker])

    # Faults ---------------------------------------------------------------------------------

    def inject_faults(self) -> None:
        """Each kind ``--fault-rounds`` times, spread evenly over the traffic; one that cannot finish a
        lock's TTL before the traffic ends is recorded as not injected (and fails the run)."""
        plan = [kind for _ in range(ARGS.fault_rounds) for kind in FAULT_KINDS]
        span = self.deadline - self.started
        for n, kind in enumerate(plan):
            time.sleep(max(0.0, self.started + span * (n + 1) / (len(plan) + 1) - time.monotonic()))
            began = time.monotonic()
            if began > self.deadline - settings.LOCK_TTL_SECONDS - 5:
                self.faults.append(Fault(kind, began - self.started, 0.0, "not injected: traffic ending", False))
                continue
            FAULT_UNTIL.value = float("inf")
            detail, injected = getattr(self, kind)()
            ended = time.monotonic()
            FAULT_UNTIL.value = ended + self.aftermath
            self.faults.append(Fault(kind, began - self.started, ended - began, detail, injected))
            _say(self.started, f"fault {kind}: {detail}")

    def redis_restart(self) -> tuple[str, bool]:
        REDIS.kill()
        time.sleep(ARGS.redis_down)
        REDIS.start()
        return f"down {ARGS.redis_down:g} s, restarted empty", True

    def _kill(self, procs: dict[int, multiprocessing.Process], role: str, replace) -> tuple[str, bool]:
        number, proc = self.rng.choice([(n, p) for n, p in procs.items() if p.is_alive()])
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        self.killed.add(proc.pid)
        return f"{role} {number} (pid {proc.pid}) SIGKILLed; {role} {replace()} started", True

    def kill_web(self) -> tuple[str, bool]:
        return self._kill(self.workers, "worker", self.start_worker)

    def kill_sweeper(self) -> tuple[str, bool]:
        return self._kill(self.sweepers, "sweeper", self.start_sweeper)

    def pause_holder(self) -> tuple[str, bool]:
        self.pause.value = 1
        give_up = time.monotonic() + 30
        while self.pause.value == 1 and time.monotonic() < give_up:
            time.sleep(0.01)
        with self.pause.get_lock():
            pid = self.pause.value
            if pid == 1:
                self.pause.value = 0
                return "no worker reached a one-SKU reservation within 30 s", False
        while _process_state(pid) != "T" and time.monotonic() < give_up:
            time.sleep(0.01)
        stopped = time.monotonic()
        time.sleep(settings.LOCK_TTL_SECONDS + 2)
        os.kill(pid, signal.SIGCONT)
        self.pause.value = 0
        return (
            f"worker pid {pid} stopped {time.monotonic() - stopped:.1f} s holding a SKU's lock "
            f"(lock TTL {settings.LOCK_TTL_SECONDS:g} s), then resumed",
            True,
        )

    # Results --------------------------------------------------------------------------------

    def collect(self, procs) -> dict:
        results = defaultdict(list)
        reported = {}
        for _ in [proc for proc in procs if proc.pid not in self.killed]:
            try:
                role, number, result = self.out.get(timeout=max(self.deadline + 120 - time.monotonic(), 1))
            except queue.Empty:
                break
            reported[(role, number)] = result
        lost = 0
        for proc in procs:
            proc.join(5)
            if proc.pid in self.killed:
                continue
            if proc.is_alive() or proc.exitcode:
                lost += 1
                proc.kill()
                proc.join()
        results["worker"] = [
            _read_journal(self.journals / f"worker-{number}", reported.get(("worker", number)))
            for number in self.workers
        ]
        results["sweeper"] = [result for (role, _), result in reported.items() if role == "sweeper"]
        results["checker"] = [result for (role, _), result in reported.items() if role == "checker"]
        shutil.rmtree(self.journals)
        results["seconds"] = time.monotonic() - self.started
        results["lost processes"] = lost
        results["killed processes"] = len(self.killed)
        results["started"] = self.started
        results["faults"] = self.faults
        return results


def _process_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def wind_down(started: float) -> tuple[Tally, SweepTotals, Check]:
    """Let the last reservations expire, sweep until nothing is left, then check with no grace."""
    tally, totals = Tally("final sweep"), SweepTotals()
    _count_logs(tally)
    last_expiry = Order.all_objects.filter(status=Status.AWAITING_PAYMENT).aggregate(last=Max("expires_at"))["last"]
    if last_expiry:
        wait = min((last_expiry - timezone.now()).total_seconds() + 1, ARGS.ttl + 5)
        _say(started, f"waiting {max(wait, 0):.1f} s for the last reservations to expire")
        time.sleep(max(wait, 0))
    give_up = time.monotonic() + ARGS.lease + 10  # orders a sweep skipped stay leased this long
    while True:
        _sweep_once(tally, totals)
        left = order_list_overdue().exists() or order_list_final_holding_stock().exists()
        if not left or time.monotonic() > give_up:
            break
        time.sleep(1)
    final = books_check(at=time.monotonic() - started, grace=0)
    _say_check(started, "final check", final)
    return tally, totals, final


# --- Report -----------------------------------------------------------------------------------


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _machine() -> list[list[str]]:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit")
        mariadb, flush = cursor.fetchone()
    redis_version = caches[settings.LOCK_CACHE_ALIAS].client.get_client().info("server")["redis_version"]
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    packages = ", ".join(f"{name} {version(name)}" for name in ("Django", "django-redis", "redis", "mysqlclient"))
    return [
        ["CPU", f"{cpu}, {os.cpu_count()} cores (shared by every process, MariaDB and Redis)"],
        ["Memory", f"{memory / 1024 / 1024:.0f} GiB"],
        ["Kernel", platform.release()],
        ["Python", platform.python_version()],
        ["MariaDB", f"{mariadb}, innodb_flush_log_at_trx_commit={flush}"],
        ["Redis", redis_version],
        ["Packages", packages],
        ["Code", f"git {commit or '?'}" + (" (with uncommitted changes)" if commit.endswith("-dirty") else "")],
    ]


def _settings() -> list[list[str]]:
    return [
        ["Traffic", f"{ARGS.minutes:g} min, {ARGS.workers} worker processes, mean think time {ARGS.pause} s"],
        ["SKUs", f"{ARGS.skus}: {ARGS.hot} hot (half of all lines), {ARGS.skus - ARGS.hot} cold"],
        [
            "Opening stock",
            f"hot {STOCK_START['hot']}, cold {STOCK_START['cold']}; restocks stop at hot "
            f"{STOCK_CAP['hot']}, cold {STOCK_CAP['cold']}",
        ],
        ["Reservation TTL", f"{settings.RESERVATION_TTL_SECONDS} s"],
        [
            "Sweeps",
            f"{ARGS.sweepers} sweeper processes, each every {ARGS.sweep_every} s "
            f"(batch {settings.SWEEP_BATCH_SIZE}, lease {settings.SWEEP_LEASE_SECONDS} s, "
            f"lock wait {settings.SWEEP_LOCK_WAIT_SECONDS} s)",
        ],
        [
            "Book checks",
            f"every {ARGS.check_every} s; a payment-failed order may hold stock {_grace():g} s "
            "(lease + 3 sweep intervals) before it counts as stuck",
        ],
        [
            "Locks",
            f"TTL {settings.LOCK_TTL_SECONDS} s, wait {settings.LOCK_WAIT_SECONDS} s, batch {settings.STOCK_BATCH_MAX}",
        ],
        [
            "Mix",
            ", ".join(f"{kind} {weight}" for kind, weight in OPERATIONS.items())
            + f"; {DECLINE_RATE:.0%} of payments declined; 2.5% of lines ask for "
            f"{settings.MAX_LINE_QUANTITY} units, 0.5% for {settings.MAX_LINE_QUANTITY + 1}",
        ],
    ]


def _ledger_totals() -> list[list]:
    movements = StockMovement.objects.values("kind").annotate(
        on_hand=Sum("on_hand_delta"), reserved=Sum("reserved_delta")
    )
    by_kind = {row["kind"]: row for row in movements}
    positive = StockMovement.objects.filter(kind=Kind.ADJUST, on_hand_delta__gt=0).aggregate(n=Sum("on_hand_delta"))[
        "n"
    ]
    negative = StockMovement.objects.filter(kind=Kind.ADJUST, on_hand_delta__lt=0).aggregate(n=Sum("on_hand_delta"))[
        "n"
    ]
    released = (
        StockMovement.objects.filter(kind=Kind.RELEASE)
        .values("reason")
        .annotate(units=Sum("reserved_delta"))
        .order_by("reason")
    )
    stock = Stock.objects.aggregate(on_hand=Sum("on_hand"), reserved=Sum("reserved"))
    reservations = Reservation.objects.values("state").annotate(n=Count("pk")).order_by("state")
    orders = Order.all_objects.values("status").annotate(n=Count("pk")).order_by("status")
    rows = [
        ["units received (restocks, opening stock included)", by_kind.get(Kind.RESTOCK, {}).get("on_hand", 0)],
        ["units added by staff adjustments", positive or 0],
        ["units removed by staff adjustments", -(negative or 0)],
        ["units reserved", by_kind.get(Kind.RESERVE, {}).get("reserved", 0)],
        ["units committed (sold)", -(by_kind.get(Kind.COMMIT, {}).get("on_hand") or 0)],
        *[[f"units released: {row['reason']}", -row["units"]] for row in released],
        ["on hand at the end", stock["on_hand"]],
        ["reserved at the end", stock["reserved"]],
        *[[f"reservations {row['state']}", row["n"]] for row in reservations],
        *[[f"orders {row['status']}", row["n"]] for row in orders],
    ]
    return rows


def _merge(tallies: list[Tally]) -> Tally:
    merged = Tally("all")
    for tally in tallies:
        merged.ops.update(tally.ops)
        merged.refusals.update(tally.refusals)
        merged.unexpected.update(tally.unexpected)
        merged.logged.update(tally.logged)
        merged.logged_in_fault.update(tally.logged_in_fault)
        for name, sample in tally.samples.items():
            merged.samples.setdefault(name, sample)
        for kind, seconds in tally.slowest.items():
            merged.slowest[kind] = max(merged.slowest[kind], seconds)
    return merged


def _clients_against_database(workers: list[WorkerResult]) -> tuple[list[list], list[str]]:
    """Orders and payments the callers were told of, against what the database holds, and the units
    callers were told are theirs (paid) against the units put in by the ledger's rows."""
    placed = set().union(*(w.placed for w in workers))
    paid = set().union(*(w.paid for w in workers))
    unsure = set().union(*(w.unsure_keys for w in workers))
    unsure_paid = set().union(*(w.unsure_paid for w in workers))
    told_units = Counter()
    for worker in workers:
        for pk in worker.paid:
            for item in worker.items[pk]:
                told_units[item["sku"]] += item["quantity"]
    put_in = _per_sku(
        StockMovement.objects.filter(kind__in=[Kind.RESTOCK, Kind.ADJUST]), "stock__product__sku", "on_hand_delta"
    )
    oversold = sum(max(0, told_units[sku] - put_in[sku]) for sku in told_units)
    in_db = set(Order.all_objects.values_list("pk", flat=True))
    paid_in_db = set(Order.all_objects.filter(status=Status.PAID).values_list("pk", flat=True))
    unseen = in_db - placed
    explained = set(Order.all_objects.filter(pk__in=unseen, idempotency_key__in=unsure).values_list("pk", flat=True))
    problems = []
    if placed - in_db:
        problems.append(f"{len(placed - in_db)} order(s) a caller was given are not in the database")
    if unseen - explained:
        problems.append(
            f"{len(unseen - explained)} order(s) in the database no caller was given: {sorted(unseen - explained)[:10]}"
        )
    if oversold:
        problems.append(f"callers were told they bought {oversold} unit(s) more than were put in")
    if paid - paid_in_db or paid_in_db - paid - unsure_paid:
        problems.append(
            f"paid orders: callers were told {len(paid)}, the database has {len(paid_in_db)} "
            f"(told but not paid: {sorted(paid - paid_in_db)[:10]}, "
            f"paid but not told: {sorted(paid_in_db - paid)[:10]})"
        )
    rows = [
        ["orders callers were given", len(placed)],
        ["orders in the database", len(in_db)],
        ["of those, placed though the caller got lock_timeout or an exception", len(explained)],
        ["paid orders callers were told of", len(paid)],
        ["paid orders in the database", len(paid_in_db)],
        ["of those, paid though the caller got an exception or was killed paying", len(paid_in_db & unsure_paid)],
        ["units callers were told are theirs (paid orders)", sum(told_units.values())],
        ["units put in (restock and adjustment rows)", sum(put_in.values())],
        ["oversold: units told paid beyond units put in, summed over SKUs", oversold],
    ]
    return rows, problems


def report(results, final_tally, final_sweeps, final, problems_so_far) -> tuple[Path, list[str]]:
    workers = results["worker"]
    sweepers = results["sweeper"]
    checker_tally, checks = results["checker"][0] if results["checker"] else (Tally("checker"), [])
    tally = _merge([w.tally for w in workers] + [t for t, _ in sweepers] + [checker_tally, final_tally])
    sweeps = SweepTotals()
    for totals in [s for _, s in sweepers] + [final_sweeps]:
        sweeps.passes += totals.passes
        sweeps.done.update(totals.done)
        sweeps.units.update(totals.units)
        sweeps.skipped.update(totals.skipped)
    cross_rows, problems = _clients_against_database(workers)
    problems = problems_so_far + problems
    if tally.unexpected:
        problems.append(f"unexpected exceptions: {dict(tally.unexpected)}")
    errors_logged = sum(n for (level, *_), n in tally.logged.items() if level in ("ERROR", "CRITICAL"))
    if errors_logged:
        problems.append(f"{errors_logged} error(s) logged by the shop outside any fault")
    faults = results["faults"]
    if not_injected := [f.kind for f in faults if not f.injected]:
        problems.append(f"faults not injected: {not_injected}")
    dirty = [c for c in checks if not c.clean]
    if dirty:
        problems.append(f"{len(dirty)} of {len(checks)} book checks found a problem")
    if not final.clean or final.reserved or final.open_orders or final.pending or final.overdue:
        problems.append("the final check is not clean (see the table)")
    if not checks:
        problems.append("no book check ran")

    seconds = results["seconds"]
    by_kind = Counter()
    for (kind, _), count in tally.ops.items():
        by_kind[kind] += count
    op_rows = [
        [kind, outcome, f"{count:,}", f"{tally.slowest[kind]:.2f}"]
        for (kind, outcome), count in sorted(tally.ops.items(), key=lambda item: (item[0][0], -item[1]))
    ]
    minute_rows = []
    for minute in range(int(seconds // 60) + 1):
        in_minute = [c for c in checks if minute * 60 <= c.at < (minute + 1) * 60]
        if in_minute:
            minute_rows.append(
                [
                    f"{minute}-{minute + 1}",
                    len(in_minute),
                    sum(len(c.drifted) for c in in_minute),
                    sum(len(c.negative) for c in in_minute),
                    max(c.oversold for c in in_minute),
                    sum(len(c.mismatched) for c in in_minute),
                    sum(len(c.stuck) for c in in_minute),
                    max(c.pending for c in in_minute),
                    f"{max(c.oldest_pending for c in in_minute):.1f}",
                    max(c.open_orders for c in in_minute),
                    f"{max(c.sweep_lag for c in in_minute):.1f}",
                    max(c.reserved for c in in_minute),
                    f"{max(c.seconds for c in in_minute):.2f}",
                ]
            )
    traffic_ops = sum(n for (kind, _), n in tally.ops.items() if kind in OPERATIONS)
    lines = [
        "# Soak",
        "",
        f"Generated by `python -m bench.soak --minutes {ARGS.minutes:g} --workers {ARGS.workers} --skus {ARGS.skus} "
        f"--fault-rounds {ARGS.fault_rounds}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"**{'PASS' if not problems else 'FAIL'}**: "
        + (
            f"{sum(f.injected for f in faults)} faults injected; zero drift, zero oversell (from the rows and from "
            "the answers), no unexpected exception."
            if not problems
            else "; ".join(problems)
        ),
        "",
        "Worker processes drive the real services with a random mix; sweeper processes run the sweeps",
        "Celery beat runs; a checker process reads the books in one snapshot every few seconds. Meanwhile",
        "faults are injected (below). At the end the workers stop, the last reservations expire and are",
        "swept, and a final check allows no grace. (`bench/soak.py` says how; `bin/soak` runs it.)",
        "",
        "## Faults",
        "",
        f"Spread evenly over the traffic, each kind {ARGS.fault_rounds} times. Warnings and errors the shop logs "
        f"from a fault's start until {settings.LOCK_TTL_SECONDS + settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS:g} s after "
        "its end (a lock's TTL plus a waiter's socket timeout) are listed apart, as the fault's; any other fails the "
        f"run. {results['killed processes']} processes were killed: their operations are counted from their "
        "journals (without timings), and the operation each had in flight counts as one whose outcome its caller "
        "could not know.",
        "",
        *_table(
            ["fault", "what", "injected"],
            [[kind, what, sum(f.injected for f in faults if f.kind == kind)] for kind, what in FAULT_KINDS.items()],
        ),
        "",
        *_table(
            ["at, s", "fault", "lasted, s", "detail"],
            [[f"{f.at:.0f}", f.kind, f"{f.seconds:.1f}", f.detail] for f in faults],
        ),
        "",
        "## Machine and settings",
        "",
        *_table(["", ""], _machine() + _settings()),
        "",
        "## Book checks",
        "",
        f"{len(checks)} checks in {seconds / 60:.1f} minutes, then the final one. Each reads, in one REPEATABLE READ "
        "snapshot: `stock_books()` (counters against the ledger and the active reservations), negative or "
        "over-reserved counters, units held or sold per SKU (active and committed reservation rows) against "
        "units put in (restock and adjustment ledger rows: *oversold*, which the counters' CHECK does not bound), "
        "on hand against put in minus paid and committed reservations against paid lines (*mismatched*), and "
        "final orders still holding stock (*stuck*; a payment-failed one only after the grace).",
        "",
        *_table(
            [
                "minute",
                "checks",
                "drifted rows",
                "negative rows",
                "oversold units",
                "mismatched rows",
                "stuck orders",
                "failed payments awaiting release (max)",
                "oldest of them, s",
                "open orders (max)",
                "sweep lag, s (max)",
                "reserved units (max)",
                "check took, s (max)",
            ],
            minute_rows,
        ),
        "",
        "Final check: "
        + f"drifted {len(final.drifted)}, negative {len(final.negative)}, oversold {final.oversold}, mismatched "
        f"{len(final.mismatched)}, final orders holding stock {len(final.stuck) + final.pending}, open orders "
        f"{final.open_orders}, reserved {final.reserved}.",
        "",
        "<details><summary>Every check</summary>",
        "",
        *_table(
            [
                "at, s",
                "drifted",
                "negative",
                "oversold",
                "mismatched",
                "stuck",
                "pending",
                "open",
                "overdue",
                "lag, s",
                "reserved",
                "took, s",
            ],
            [
                [
                    "final" if c is final else f"{c.at:.0f}",
                    len(c.drifted),
                    len(c.negative),
                    c.oversold,
                    len(c.mismatched),
                    len(c.stuck),
                    c.pending,
                    c.open_orders,
                    c.overdue,
                    f"{c.sweep_lag:.1f}",
                    c.reserved,
                    f"{c.seconds:.2f}",
                ]
                for c in checks + [final]
            ],
        ),
        "",
        "</details>",
        "",
        "## Operations",
        "",
        f"{traffic_ops:,} traffic operations in {seconds:.0f} s ({traffic_ops / seconds:.0f}/s). Outcomes other than "
        "the expected success are refusals by their error code. *slowest* is the longest single call of that kind.",
        "",
        *_table(["operation", "outcome", "count", "slowest, s"], op_rows),
        "",
        "## Refusals by code",
        "",
        *_table(["code", "count"], [[code, f"{n:,}"] for code, n in tally.refusals.most_common()]),
        "",
        "## Unexpected exceptions",
        "",
    ]
    if tally.unexpected:
        lines += _table(["exception", "count"], [[name, n] for name, n in tally.unexpected.most_common()])
        for name, sample in tally.samples.items():
            lines += ["", f"First `{name}`:", "", "```", sample.strip(), "```"]
    else:
        lines.append("None.")
    for title, logged in (
        ("Warnings and errors the shop logged outside the faults", tally.logged),
        ("Warnings and errors the shop logged during a fault or its aftermath", tally.logged_in_fault),
    ):
        lines += ["", f"## {title}", ""]
        if logged:
            lines += _table(
                ["level", "logger", "message", "count"],
                [[level, name, f"`{message}`", n] for (level, name, message), n in logged.most_common()],
            )
        else:
            lines.append("None.")
    lines += [
        "",
        "## Sweeps",
        "",
        f"{sweeps.passes} passes (the final ones included); the payment sweep settled "
        f"{sweeps.done['charges settled']} charge(s) left unsettled over {settings.PAYMENT_SETTLE_AFTER_SECONDS:g} s "
        "(their payer was killed).",
        "",
        *_table(
            ["sweep", "orders released", "units", "orders skipped (SKU busy)"],
            [[name, sweeps.done[name], sweeps.units[name], sweeps.skipped[name]] for name in ("expired", "failed")],
        ),
        "",
        "## Units and orders",
        "",
        *_table(["", ""], _ledger_totals()),
        "",
        "## What the callers were told, against the database",
        "",
        "Read from the workers' journals (a killed worker's included). *Oversold* here counts from the answers: "
        "the units of every order a caller was told is paid, per SKU, beyond the units put in.",
        "",
        *_table(["", ""], cross_rows),
        "",
    ]
    ARGS.report.parent.mkdir(parents=True, exist_ok=True)
    ARGS.report.write_text("\n".join(lines))
    return ARGS.report, problems


def main():
    skus, staff_id = catalog()
    results = Run(skus, staff_id).run()
    started = results["started"]
    problems = []
    if results["lost processes"]:
        problems.append(f"{results['lost processes']} process(es) died or hung")
    final_tally, final_sweeps, final = wind_down(started)
    path, problems = report(results, final_tally, final_sweeps, final, problems)
    _say(started, f"wrote {path}")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
