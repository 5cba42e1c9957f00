"""The books, checked in one snapshot: counters, ledger, reservations and orders must agree."""

import argparse
import time
from collections import Counter
from dataclasses import dataclass

from django.db import connection, connections, transaction
from django.db.models import Count, Min, Sum
from django.utils import timezone

from bench.soak.record import Tally, count_logs, say
from inventory.models import Reservation, StockMovement
from inventory.selectors import stock_books
from orders.models import Order, OrderLine
from orders.selectors import order_list_final_holding_stock, order_list_overdue

Status = Order.Status
Kind = StockMovement.Kind


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


def per_sku(queryset, sku_field: str, value_field: str) -> Counter:
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
        put_in = per_sku(
            StockMovement.objects.filter(kind__in=[Kind.RESTOCK, Kind.ADJUST]), "stock__variant__sku", "on_hand_delta"
        )
        sold = per_sku(OrderLine.all_objects.filter(order__status=Status.PAID), "variant__sku", "quantity")
        committed = per_sku(Reservation.objects.filter(state=Reservation.State.COMMITTED), "variant__sku", "quantity")
        taken = per_sku(
            Reservation.objects.filter(state__in=[Reservation.State.ACTIVE, Reservation.State.COMMITTED]),
            "variant__sku",
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


def failed_payment_grace(args: argparse.Namespace) -> float:
    """How long a payment-failed order may hold its stock here: a sweep that skipped it leases it first."""
    return args.lease + 3 * args.sweep_every


def checker_process(args, started, deadline, out):
    """The checker process: the books every ``--check-every`` seconds until ``deadline``, the checks on ``out``."""
    connections.close_all()
    tally, checks = Tally("checker"), []
    count_logs(tally)

    def check():
        checks.append(books_check(at=time.monotonic() - started, grace=failed_payment_grace(args)))
        last = checks[-1]
        say_check(started, f"check {len(checks)}", last)
        return "clean" if last.clean else "PROBLEM"

    while time.monotonic() < deadline:
        began = time.monotonic()
        tally.run("book_check", check)
        time.sleep(max(0.0, args.check_every - (time.monotonic() - began)))
    out.put(("checker", 0, (tally, checks)))
    connections.close_all()


def say_check(started: float, label: str, check: Check) -> None:
    say(started, f"{label}: {check.summary()}")
    for problem in check.drifted + check.negative + check.mismatched + check.stuck:
        say(started, f"  PROBLEM {problem}")
