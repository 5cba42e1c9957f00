"""Traffic: worker processes drive the real services with a random mix and journal what they were told."""

import argparse
import json
import os
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Max

from bench.soak.record import Journal, Tally, count_logs
from core.errors import DomainError
from inventory import sql
from inventory.models import Stock
from inventory.services import stock_adjust, stock_restock
from orders.models import Order
from orders.services import order_cancel, order_expire, order_fail_payment, order_place
from payments.models import Payment, PaymentEvent
from payments.providers.local import LOCAL_OUTCOMES, local_event
from payments.providers.stripe import webhook_event_verify, webhook_sign
from payments.services import order_pay, payment_event_process, payment_event_receive

Status = Order.Status

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
    payment_event_receive(provider="local", event=verified)
    payment_event_process(event=PaymentEvent.objects.get(event_id=verified["id"]))


STOCK_START = {"hot": 40, "cold": 20}
STOCK_CAP = {"hot": 200, "cold": 60}  # restocks turn into reductions above this, so stock stays scarce


class SoakAnomaly(Exception):
    """A service answered something it must not (a replay giving another order, say): fails the run."""


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


def read_journal(path: Path, tally: Tally | None) -> WorkerResult:
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
    def __init__(
        self, args: argparse.Namespace, number: int, skus: dict[str, list[str]], staff_id: int, journal: Journal
    ):
        self.args = args
        self.rng = random.Random(args.seed * 1000 + number)
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
            if self.args.pause:
                time.sleep(self.rng.expovariate(1 / self.args.pause))
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
        cutoff = time.monotonic() - self.args.ttl
        overdue = self.rng.random() < overdue_share
        return self._load([placed for placed in self.mine if (placed.at < cutoff) == overdue])

    def _load(self, pool: list[Placed]) -> Order | None:
        if not pool:
            return None
        return Order.objects.prefetch_related("lines__variant").filter(pk=self.rng.choice(pool).pk).first()

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
            .prefetch_related("lines__variant")
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
        cutoff = time.monotonic() - self.args.ttl
        soon = [p for p in self.mine if cutoff - 2 * self.args.sweep_every < p.at < cutoff]
        if (order := self._load(soon)) is None:
            return None
        return "expired" if order_expire(order=order) else "not due or settled"

    # Staff ----------------------------------------------------------------------------------

    def _stock(self) -> tuple[str, str, Stock]:
        temperature = "hot" if self.rng.random() < 0.6 else "cold"
        sku = self.rng.choice(self.skus[temperature])
        return sku, temperature, Stock.objects.get(variant__sku=sku)

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


def worker_process(args, number, skus, staff_id, deadline, journal_path, pause, out):
    """A worker process: traffic until ``deadline``, then its tally on ``out``."""
    connections.close_all()  # never share the parent's socket
    worker = Worker(args, number, skus, staff_id, Journal(journal_path))
    count_logs(worker.tally)
    _stop_when_asked(pause)
    out.put(("worker", number, worker.run(deadline)))
    connections.close_all()


def _stop_when_asked(pause) -> None:
    """The paused-holder fault: once the injector sets ``pause`` to 1, the first worker to reach a one-SKU
    reservation's guarded UPDATE (holding that SKU's lock, before writing) puts its pid there and
    SIGSTOPs itself; the injector resumes it after the lock's TTL."""
    write = sql.reserved_add_if_free

    def stop_then_write(**kwargs):
        with pause.get_lock():
            chosen = pause.value == 1
            if chosen:
                pause.value = os.getpid()
        if chosen:
            os.kill(os.getpid(), signal.SIGSTOP)
        return write(**kwargs)

    sql.reserved_add_if_free = stop_then_write
