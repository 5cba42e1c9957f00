"""Sweeps on real MariaDB + Redis: bounded, exactly once, never a paid order, never blocked by one bad order."""

from datetime import timedelta

import pytest
from django.utils import timezone

import orders.services
from inventory.models import Reservation, StockMovement
from orders.models import Order
from orders.services import (
    order_fail_payment,
    order_pay,
    order_place,
    order_release_expired,
    order_release_failed_payments,
)
from orders.tasks import release_order_stock, sweep_expired_orders
from tests.conftest import assert_books_balance, stock_of
from tests.race import holding, run_parallel


def place(sku, quantity, key):
    return order_place(email=f"{key}@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def make_overdue(*orders_):
    Order.objects.filter(pk__in=[o.pk for o in orders_]).update(expires_at=timezone.now() - timedelta(seconds=1))


def releases_per_reservation():
    return {r.pk: r.movements.filter(kind="release").count() for r in Reservation.objects.all()}


@pytest.mark.django_db(transaction=True)
def test_the_sweep_expires_overdue_orders_in_batches_and_never_a_paid_one(make_product):
    mug = make_product(sku="MUG", stock=50)
    overdue = [place("MUG", 2, f"o{i}") for i in range(7)]
    fresh = place("MUG", 1, "fresh")
    paid = order_pay(order=place("MUG", 1, "paid"))
    make_overdue(*overdue, paid)

    sweep = order_release_expired(batch_size=3)

    assert (sweep.done, sweep.units, sweep.skipped) == (7, 14, [])
    assert set(Order.objects.filter(status="expired").values_list("pk", flat=True)) == {o.pk for o in overdue}
    assert Order.objects.get(pk=fresh.pk).status == "awaiting_payment"
    assert Order.objects.get(pk=paid.pk).status == "paid"
    assert stock_of(mug).reserved == 1
    assert order_release_expired(batch_size=3).done == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_one_bad_order_does_not_stop_the_batch_and_a_busy_one_is_retried_later(make_product, settings, monkeypatch):
    settings.SWEEP_LOCK_WAIT_SECONDS = 0.2
    settings.SWEEP_LEASE_SECONDS = 30  # lapsed by hand below
    mug, tee = make_product(sku="MUG", stock=10), make_product(sku="TEE", stock=10)
    bad, busy, good = place("MUG", 1, "bad"), place("TEE", 1, "busy"), place("MUG", 1, "good")
    make_overdue(bad, busy, good)
    real_expire = orders.services.order_expire

    def expire_or_break(*, order):
        if order.pk == bad.pk:
            raise RuntimeError("corrupt row")
        return real_expire(order=order)

    monkeypatch.setattr(orders.services, "order_expire", expire_or_break)
    with holding(["TEE"]):  # a payment in flight holds TEE
        sweep = order_release_expired(batch_size=10)

    assert sweep.done == 1 and sorted(sweep.skipped) == sorted([bad.number, busy.number])
    assert Order.objects.get(pk=good.pk).status == "expired"

    monkeypatch.setattr(orders.services, "order_expire", real_expire)
    assert order_release_expired(batch_size=10).done == 0  # still leased: not retried at once
    Order.objects.update(sweep_lease_until=timezone.now() - timedelta(seconds=1))  # the lease lapses
    assert order_release_expired(batch_size=10).done == 2
    assert_books_balance(mug, tee)


def _sweep(batch_size):
    return order_release_expired(batch_size=batch_size).done


@pytest.mark.django_db(transaction=True)
def test_several_sweepers_at_once_release_every_order_exactly_once(make_product):
    mug = make_product(sku="MUG", stock=500)
    make_overdue(*[place("MUG", 1, f"o{i}") for i in range(120)])

    done = run_parallel(_sweep, [{"batch_size": 10}] * 4, processes=4, barrier=True)

    assert sum(done) == 120
    assert Order.objects.filter(status="expired").count() == 120
    assert set(releases_per_reservation().values()) == {1}
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_the_same_task_delivered_twice_releases_nothing_twice(make_product):
    mug = make_product(sku="MUG", stock=10)
    failed = place("MUG", 3, "failed")
    Order.objects.filter(pk=failed.pk).update(status="payment_failed")  # marked; its task is "in the queue"
    overdue = place("MUG", 2, "late")
    make_overdue(overdue)

    release_order_stock.apply(args=[failed.pk])
    release_order_stock.apply(args=[failed.pk])
    sweep_expired_orders.apply()
    Order.objects.update(sweep_lease_until=None)
    sweep_expired_orders.apply()

    assert set(releases_per_reservation().values()) == {1}
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_the_failed_payment_sweep_catches_a_release_that_was_never_run(make_product):
    mug = make_product(sku="MUG", stock=10)
    order = place("MUG", 4, "lost-task")
    Order.objects.filter(pk=order.pk).update(status="payment_failed")  # the task was lost with the broker

    sweep = order_release_failed_payments(batch_size=10)

    assert (sweep.done, sweep.units) == (1, 4)
    assert Reservation.objects.get().release_reason == "payment_failed"
    assert order_release_failed_payments(batch_size=10).done == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_with_no_sweeper_the_last_units_held_by_overdue_orders_still_sell(make_product):
    mug = make_product(sku="MUG", stock=5)
    make_overdue(place("MUG", 3, "late-1"), place("MUG", 2, "late-2"))
    assert stock_of(mug).available == 0

    order = place("MUG", 5, "buyer")

    assert order.status == "awaiting_payment"
    assert Order.objects.filter(status="expired").count() == 2
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 5)
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_overdue_orders_are_expired_even_when_the_new_order_is_still_refused(make_product):
    mug = make_product(sku="MUG", stock=5)
    make_overdue(place("MUG", 2, "late"))
    place("MUG", 3, "holder")

    with pytest.raises(Exception) as error:
        place("MUG", 4, "buyer")

    assert error.value.code == "insufficient_stock"
    assert error.value.payload["shortages"] == [{"sku": "MUG", "requested": 4, "available": 2}]
    assert Order.objects.filter(status="expired").count() == 1  # the expiry was kept
    assert not Order.objects.filter(idempotency_key="buyer").exists()
    assert_books_balance(mug)


def _pay_or_sweep(action, order_ids):
    if action == "sweep":
        return ("sweep", order_release_expired(batch_size=5).done)
    paid = 0
    for order_id in order_ids:
        try:
            paid += order_pay(order=Order.objects.get(pk=order_id)).status == "paid"
        except Exception as exc:  # a domain refusal is a fine outcome; the parent checks the books
            assert getattr(exc, "code", None), exc
    return ("pay", paid)


@pytest.mark.django_db(transaction=True)
def test_payments_racing_sweeps_never_both_pay_and_release_an_order(make_product):
    mug = make_product(sku="MUG", stock=200)
    placed = [place("MUG", 1 + i % 3, f"o{i}") for i in range(60)]
    make_overdue(*placed)
    ids = [o.pk for o in placed]
    jobs = [{"action": "sweep", "order_ids": []} for _ in range(3)] + [
        {"action": "pay", "order_ids": ids[i::3]} for i in range(3)
    ]

    run_parallel(_pay_or_sweep, jobs, processes=6, barrier=True)

    for order in Order.objects.all():
        assert order.status in ("paid", "expired"), order.status
        for reservation in Reservation.objects.filter(order_line__order=order):
            kinds = sorted(reservation.movements.values_list("kind", flat=True))
            assert kinds in (["commit", "reserve"], ["release", "reserve"]), kinds
        committed = Reservation.objects.filter(order_line__order=order, state="committed").count()
        assert committed == (1 if order.status == "paid" else 0)
    assert stock_of(mug).reserved == 0
    assert StockMovement.objects.filter(kind="commit").count() == Order.objects.filter(status="paid").count()
    assert_books_balance(mug)


@pytest.mark.django_db
def test_failing_a_payment_races_safely_with_paying(make_product, celery_eager, django_capture_on_commit_callbacks):
    mug = make_product(sku="MUG", stock=5)
    order = place("MUG", 2, "o")
    order_pay(order=order)
    with django_capture_on_commit_callbacks(execute=True):
        assert order_fail_payment(order=order) is False
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
