"""Order state races with real processes on MariaDB + Redis, on scarce stock so a wrong interleaving shows."""

import random
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import DomainError
from inventory.models import Reservation, StockMovement
from orders.models import Order
from orders.services import order_cancel, order_expire, order_fail_payment, order_place
from tests.conftest import assert_books_balance, pay, sold_out_marks_lapse, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)

Status = Order.Status
LEDGER = {"active": ["reserve"], "committed": ["commit", "reserve"], "released": ["release", "reserve"]}
# What a step on a placed order may answer: its status, True/False, or a domain error's code.
ANSWERS = {
    # Paying answers the status once the provider's webhook is applied: paid, or (a charge that came too late,
    # refunded) whatever the order became meanwhile; or why the payment could not start. A click while another
    # click's charge is being applied gets that payment, still awaiting payment: no second charge starts.
    "pay": {
        Status.PAID,
        Status.CANCELLED,
        Status.PAYMENT_FAILED,
        Status.EXPIRED,
        Status.AWAITING_PAYMENT,
        "order_expired",
        "order_not_payable",
    },
    "decline": {
        Status.AWAITING_PAYMENT,
        Status.PAYMENT_FAILED,
        Status.PAID,
        Status.CANCELLED,
        Status.EXPIRED,
        "order_expired",
        "order_not_payable",
    },
    "cancel": {Status.CANCELLED, "order_not_cancellable"},
    "fail": {True, False},
    "expire": {True, False},
}


def _steps(steps):
    """One process's share of the steps, in order, each answered as its caller would be told."""
    wait_for_peers()
    return [_answer(**step) for step in steps]


def _answer(action, order_id=None, key=None):
    try:
        if action == "place":
            return order_place(
                email="new@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key=key
            ).number
        order = Order.objects.get(pk=order_id)
        if action in ("pay", "decline"):
            return pay(order, decline=action == "decline").status
        if action == "cancel":
            return order_cancel(order=order).status
        if action == "fail":
            return order_fail_payment(order=order)
        return order_expire(order=order)
    except DomainError as exc:
        return exc.code


def test_pay_decline_fail_cancel_expire_and_place_racing_for_the_last_units_agree_with_the_books(
    make_variant, celery_eager
):
    """Every unit is held by an overdue order, and new orders want more than there is. Whatever the
    interleaving, each answer holds in the final state, no unit goes twice, and the books balance."""
    received = 12
    mug = make_variant(sku="MUG", stock=received)
    held = [
        order_place(email="x@example.com", items=[{"sku": "MUG", "quantity": 1 + i % 2}], idempotency_key=f"o{i}")
        for i in range(8)
    ]
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # every action is legal on every order
    sold_out_marks_lapse()
    steps = [
        {"action": action, "order_id": order.pk}
        for i, order in enumerate(held)
        for action in ("pay", "pay", "expire", ("decline", "fail", "cancel")[i % 3])
    ] + [{"action": "place", "key": f"new-{i}"} for i in range(8)]  # 16 units wanted, 12 received
    random.Random(10).shuffle(steps)
    shares = [steps[i::8] for i in range(8)]

    answers = run_parallel(_steps, [{"steps": share} for share in shares], processes=8, barrier=True)

    told = defaultdict(set)
    for step, answer in zip(sum(shares, []), sum(answers, []), strict=True):
        if step["action"] == "place":  # the new order's number, or why there is none
            told[step["key"]] = answer
        else:
            assert answer in ANSWERS[step["action"]], (step, answer)
            told[step["order_id"]].add((step["action"], answer))
    for order in held:
        assert_told_what_happened(Order.objects.get(pk=order.pk), told[order.pk])
    refused = 0
    for i in range(8):
        answer, placed = told[f"new-{i}"], Order.objects.filter(idempotency_key=f"new-{i}").first()
        if answer == "insufficient_stock":
            assert placed is None
            refused += 1
        else:
            assert (placed.number, placed.status) == (answer, Status.AWAITING_PAYMENT)
            assert_told_what_happened(placed, set())
    assert refused >= 2  # 16 units for the 12 that overdue orders gave back at most
    sold = sum(line.quantity for o in Order.objects.filter(status=Status.PAID) for line in o.lines.all())
    holding = sum(r.quantity for r in Reservation.objects.filter(state="active"))
    assert sold + holding <= received
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (received - sold, holding)
    assert_books_balance(mug)


def assert_told_what_happened(order: Order, told: set) -> None:
    """``order``'s reservations, ledger and charges agree with its status, and so does every answer about it
    (``told``: the (action, answer) pairs its callers got)."""
    reservations = list(Reservation.objects.filter(order_line__order=order))
    for reservation in reservations:  # never both committed and released
        assert sorted(reservation.movements.values_list("kind", flat=True)) == LEDGER[reservation.state]
    states = Counter(r.state for r in reservations)
    released = Counter(r.release_reason for r in reservations if r.state == "released")
    charges = Counter(order.payments.values_list("state", flat=True))
    status = order.status
    assert set(charges) <= {"captured", "refunded", "failed"}, charges  # every charge applied, refunded or failed
    assert states["committed"] == charges["captured"] == (status == Status.PAID), (status, states, charges)
    assert states["active"] == (status == Status.AWAITING_PAYMENT), (status, states)
    # A reservation is released once (its ledger above); a declined order paid again is reserved anew.

    def said(*answers):
        return bool(told & set(answers))

    assert (status == Status.PAID) == said(("pay", Status.PAID), ("decline", Status.PAID))
    assert (status == Status.CANCELLED) == said(("cancel", Status.CANCELLED))
    if said(("cancel", "order_not_cancellable")):
        assert status == Status.PAID
    if status == Status.PAYMENT_FAILED:
        assert said(("fail", True), ("decline", Status.PAYMENT_FAILED)) and released["payment_failed"] >= 1
    if said(("pay", "order_not_payable"), ("decline", "order_not_payable")):
        assert status == Status.CANCELLED  # only a cancelled order is never paid again
    if said(("expire", True)):
        assert released["expired"] >= 1


def _place_same_key():
    wait_for_peers()
    return order_place(email="r@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="replayed").pk


def test_the_same_order_fired_concurrently_is_placed_once(make_variant):
    mug = make_variant(sku="MUG", stock=10)

    order_ids = run_parallel(_place_same_key, [{}] * 12, processes=12, barrier=True)

    assert len(set(order_ids)) == 1
    assert Order.objects.count() == 1
    assert stock_of(mug).reserved == 2
    assert StockMovement.objects.filter(kind="reserve").count() == 1
    assert_books_balance(mug)
