"""The line under real parallelism, against a serial model: buyers join from several processes, two runners
admit at once while holds lapse, orders are paid and cancelled and units are restocked; the line admits in
arrival order per product, never more than the units, each place once, and leaves no unit idle while
someone waits for it."""

import random
import time
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from drops import line
from drops.models import Drop
from drops.waiting import line_enter
from inventory.services import stock_restock
from orders.models import PAID_STATUSES, Order, OrderLine
from orders.services import drop_line_pass, order_cancel, order_hold_checkout
from orders.services.holding import hold_key
from orders.services.sweeps import order_release_expired
from tests.conftest import assert_books_balance, pay, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)

RUN_SECONDS = 6


def _join(*, drop_id: int, buyers: list[tuple[str, str]]) -> list[tuple[int, str]]:
    wait_for_peers()
    placed = []
    for email, sku in buyers:
        told, _ = line_enter(drop_id=drop_id, sku=sku, quantity=1, customer_id=None, email=email, ticket=None)
        placed.append((told.ticket, sku))
    return placed


def _run_line(*, drop_id: int) -> int:
    """A runner, as ``manage.py drop_line`` passes."""
    drop, admitted, until = Drop.objects.get(pk=drop_id), 0, time.monotonic() + RUN_SECONDS
    while time.monotonic() < until:
        admitted += drop_line_pass(drop=drop).admitted
        time.sleep(0.02)
    return admitted


def _buyers_act(*, drop_id: int, seed: int) -> Counter:
    """Admitted buyers check out and pay, or cancel, or let their window lapse; returns restock units."""
    rng, done, until = random.Random(seed), Counter(), time.monotonic() + RUN_SECONDS
    while time.monotonic() < until:
        held = list(Order.objects.filter(status=Order.Status.HELD).order_by("?")[:3])
        for order in held:
            action = rng.choice(["pay", "pay", "cancel", "lapse", "restock"])
            if action == "pay":
                pay(order_hold_checkout(order=order))
            elif action == "cancel":
                order_cancel(order=order)
            elif action == "lapse":
                Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
                order_release_expired(batch_size=50)
            else:
                sku = order.lines.get().variant.sku
                stock_restock(sku=sku, quantity=1, reason="return restocked")
                done[sku] += 1
            done[action] += 1
        time.sleep(0.05)
    return done


def _act(*, kind: str, **job):
    return {"line": _run_line, "buyers": _buyers_act}[kind](**job)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_line_admits_in_order_and_never_more_than_the_units(make_drop, seed):
    rng = random.Random(seed)
    drop = make_drop(sizes=3, units=4, window=600)
    variants = [entry.variant for entry in drop.entries.order_by("variant_id")]
    drop_line_pass(drop=drop)  # the news opens the line
    buyers = [(f"buyer{n}@example.com", rng.choice(variants).sku) for n in range(60)]
    joined = run_parallel(
        _join, [{"drop_id": drop.pk, "buyers": buyers[n::4]} for n in range(4)], processes=4, barrier=True
    )
    tickets = sorted(ticket for part in joined for ticket, _ in part)
    assert tickets == list(range(1, 61))  # one place each, numbered in the one order Redis saw them arrive
    sku_of = {ticket: sku for part in joined for ticket, sku in part}
    jobs = [{"kind": "line", "drop_id": drop.pk}, {"kind": "line", "drop_id": drop.pk}]
    results = run_parallel(_act, [*jobs, {"kind": "buyers", "drop_id": drop.pk, "seed": seed}], processes=3)
    acted = results[2]
    while drop_line_pass(drop=drop).admitted:  # the last units freed are admitted too
        pass

    admitted = line.line_admitted(drop_id=drop.pk)
    assert len(admitted) == len(set(admitted)), "a place was admitted twice"
    orders = {o.idempotency_key: o for o in Order.objects.all()}
    assert set(orders) == {hold_key(drop_id=drop.pk, ticket=t) for t in admitted}, "an order without its place"
    by_sku = defaultdict(list)
    for ticket in admitted:
        by_sku[sku_of[ticket]].append(ticket)
    for variant in variants:
        joined_here = sorted(t for t, sku in sku_of.items() if sku == variant.sku)
        # the serial model: the k-th hold of a product goes to the k-th buyer who joined for it
        assert by_sku[variant.sku] == joined_here[: len(by_sku[variant.sku])], variant.sku
        stock = stock_of(variant)
        sold = OrderLine.objects.filter(variant=variant, order__status__in=PAID_STATUSES).aggregate(n=Sum("quantity"))
        assert stock.on_hand == 4 + acted[variant.sku] - (sold["n"] or 0), "units appeared or vanished"
        waiting = len(joined_here) - len(by_sku[variant.sku])
        if waiting:  # freed units go to the line: none idle while a buyer waits for this product
            assert stock.available == 0, variant.sku
    assert_books_balance(*variants)
    assert acted["pay"] and acted["cancel"] + acted["lapse"], acted
