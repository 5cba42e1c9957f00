from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from config.celery import app
from core.errors import InvalidInput
from inventory.models import Reservation, StockMovement
from orders.errors import IdempotencyConflict, OrderExpired, OrderNotCancellable, OrderNotPayable
from orders.models import Order, new_order_number
from orders.services import (
    order_cancel,
    order_expire,
    order_fail_payment,
    order_place,
    order_release_failed_payments,
)
from shop.models import ProductVariant
from tests.conftest import assert_books_balance, pay, stock_of

pytestmark = pytest.mark.django_db


def place(customer, key="k", **quantities):
    items = [{"sku": sku, "quantity": q} for sku, q in quantities.items()]
    return order_place(customer=customer, items=items, idempotency_key=key)


def overdue(order):
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    order.refresh_from_db()
    return order


def test_place_snapshots_prices_and_sets_the_expiry(make_variant, customer, settings):
    settings.RESERVATION_TTL_SECONDS = 600
    mug = make_variant(sku="MUG", stock=10, price="4.50")
    before = timezone.now()
    order = place(customer, MUG=2)

    assert order.status == Order.Status.AWAITING_PAYMENT
    assert before + timedelta(seconds=599) < order.expires_at <= timezone.now() + timedelta(seconds=600)
    assert str(order.total) == "9.00"
    mug.price = "99.00"
    mug.save()
    assert str(Order.objects.get(pk=order.pk).total) == "9.00"
    assert len(order.number) == 10


def test_order_numbers_use_only_the_unambiguous_letters_and_each_letter_turns_up():
    numbers = [new_order_number() for _ in range(2000)]

    assert all(len(number) == 10 for number in numbers)
    assert len(set(numbers)) == len(numbers)
    # No 0/O/1/I; and over 20,000 letters every one of the 32 appears (a bias to a few would not).
    assert set("".join(numbers)) == set("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")


def test_a_replay_with_the_same_key_returns_the_same_order(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    first = place(customer, "same", MUG=2)
    again = order_place(customer=customer, items=[{"sku": "mug", "quantity": 2}], idempotency_key="same")

    assert again.pk == first.pk
    assert stock_of(mug).reserved == 2
    assert Order.objects.count() == 1


def test_the_same_key_with_a_different_body_is_a_conflict(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    place(customer, "same", MUG=2)
    with pytest.raises(IdempotencyConflict) as error:
        place(customer, "same", MUG=3)
    assert error.value.code == "idempotency_conflict"
    assert stock_of(mug).reserved == 2


def test_keys_are_per_customer(make_variant, customer, django_user_model):
    make_variant(sku="MUG", stock=10)
    bob = django_user_model.objects.create_user(username="bob", password="pw-bob-123")
    assert place(customer, "same", MUG=1).pk != place(bob, "same", MUG=1).pk


@pytest.mark.parametrize("key", ["", "   ", "x" * 65, None, 5])
def test_a_missing_or_malformed_key_is_refused(make_variant, customer, key):
    mug = make_variant(sku="MUG", stock=10)
    with pytest.raises(InvalidInput):
        order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key=key)
    assert stock_of(mug).reserved == 0


def test_pay_commits_the_reservation_and_paying_again_is_idempotent(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, MUG=3)

    paid = pay(order)
    again = pay(order)

    assert paid.status == again.status == Order.Status.PAID
    assert paid.payment_reference == again.payment_reference != ""
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (7, 0)
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert_books_balance(mug)


def test_a_declined_payment_fails_the_order_and_the_release_task_gives_its_stock_back(
    make_variant, customer, celery_eager, django_capture_on_commit_callbacks
):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, MUG=3)

    with django_capture_on_commit_callbacks(execute=True):
        failed = pay(order, decline=True)

    assert failed.status == Order.Status.PAYMENT_FAILED
    assert failed.payments.get().state == "failed"
    assert Reservation.objects.get(order_line__order=order).release_reason == "payment_failed"
    assert stock_of(mug).available == 10
    assert_books_balance(mug)


def test_a_declined_order_is_paid_on_a_second_try_with_its_units_reserved_again(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, MUG=3)
    failed = pay(order, decline=True)
    assert stock_of(mug).reserved == 3  # the release task has not run yet

    paid = pay(failed)

    assert paid.status == Order.Status.PAID and paid.payments.count() == 2
    reservations = Reservation.objects.filter(order_line__order=order).order_by("pk")
    assert [(r.state, r.release_reason) for r in reservations] == [("released", "payment_failed"), ("committed", "")]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (7, 0)
    assert_books_balance(mug)


def test_paying_an_expired_order_reserves_again_when_stock_allows(make_variant, customer):
    mug = make_variant(sku="MUG", stock=5)
    order = overdue(place(customer, MUG=3))
    assert order_expire(order=order) is True
    assert stock_of(mug).reserved == 0

    paid = pay(order)

    assert paid.status == Order.Status.PAID
    assert paid.expires_at > timezone.now()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (2, 0)
    states = sorted(Reservation.objects.filter(order_line__order=order).values_list("state", flat=True))
    assert states == ["committed", "released"]
    assert_books_balance(mug)


def test_paying_an_expired_order_is_refused_when_its_stock_is_gone(make_variant, customer, django_user_model):
    mug = make_variant(sku="MUG", stock=5)
    order = overdue(place(customer, MUG=3))
    order_expire(order=order)
    bob = django_user_model.objects.create_user(username="bob", password="pw-bob-123")
    place(bob, "bob", MUG=4)

    with pytest.raises(OrderExpired) as error:
        pay(order)

    assert error.value.code == "order_expired"
    assert error.value.payload["shortages"] == [{"sku": "MUG", "requested": 3, "available": 1}]
    order.refresh_from_db()
    assert order.status == Order.Status.EXPIRED
    assert stock_of(mug).reserved == 4
    assert_books_balance(mug)


def test_an_order_expired_longer_than_the_payable_window_cannot_be_paid(make_variant, customer, settings):
    settings.EXPIRED_ORDER_PAYABLE_SECONDS = 3600
    mug = make_variant(sku="MUG", stock=5)
    order = overdue(place(customer, MUG=3))
    order_expire(order=order)
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=3601))

    with pytest.raises(OrderExpired) as error:
        pay(order)

    assert error.value.code == "order_expired"
    assert error.value.payload["prices"] == [{"sku": "MUG", "price": "9.99"}]  # the buyer orders anew at these
    order.refresh_from_db()
    assert order.status == Order.Status.EXPIRED and stock_of(mug).reserved == 0
    assert_books_balance(mug)


def test_an_expired_order_whose_price_changed_cannot_be_paid_at_the_old_price(make_variant, customer):
    mug = make_variant(sku="MUG", stock=5, price="9.99")
    order = overdue(place(customer, MUG=3))
    order_expire(order=order)
    ProductVariant.objects.filter(pk=mug.pk).update(price=Decimal("12.50"))

    with pytest.raises(OrderExpired) as error:
        pay(order)

    assert error.value.payload["prices"] == [{"sku": "MUG", "price": "12.50"}]
    order.refresh_from_db()
    assert order.status == Order.Status.EXPIRED and stock_of(mug).reserved == 0
    assert not order.payments.exists()  # nothing was charged
    assert_books_balance(mug)


def test_expire_only_touches_overdue_unpaid_orders(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    fresh = place(customer, "a", MUG=1)
    paid = overdue(pay(place(customer, "b", MUG=1)))

    assert order_expire(order=fresh) is False
    assert order_expire(order=paid) is False
    late = overdue(place(customer, "c", MUG=2))
    assert order_expire(order=late) is True
    assert order_expire(order=late) is False  # twice releases nothing twice
    assert StockMovement.objects.filter(order=late, kind="release").count() == 1
    assert stock_of(mug).reserved == 1
    assert_books_balance(mug)


def test_cancel_releases_stock_and_refuses_paid_orders(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, "a", MUG=4)
    cancelled = order_cancel(order=order)
    assert order_cancel(order=order).status == cancelled.status == Order.Status.CANCELLED
    assert StockMovement.objects.filter(order=order, kind="release").count() == 1
    with pytest.raises(OrderNotPayable):
        pay(order)

    paid = pay(place(customer, "b", MUG=1))
    with pytest.raises(OrderNotCancellable) as error:
        order_cancel(order=paid)
    assert error.value.code == "order_not_cancellable"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (9, 0)
    assert_books_balance(mug)


def test_fail_payment_marks_the_order_and_enqueues_the_release(
    make_variant, customer, celery_eager, django_capture_on_commit_callbacks
):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, "a", MUG=2)
    with django_capture_on_commit_callbacks(execute=True) as enqueued:
        assert order_fail_payment(order=order) is True
    assert len(enqueued) == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAYMENT_FAILED
    assert stock_of(mug).reserved == 0

    paid = pay(place(customer, "b", MUG=1))
    with django_capture_on_commit_callbacks(execute=True) as enqueued:
        assert order_fail_payment(order=order) is False
        assert order_fail_payment(order=paid) is False
    assert enqueued == []
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (9, 0)
    assert StockMovement.objects.filter(kind="release").count() == 1
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_a_failed_payment_with_the_broker_down_is_still_reported_done_and_the_sweep_releases_it(
    make_variant, customer, monkeypatch, caplog
):
    """The status change has committed: a broker that cannot take the release task must not turn that
    into an error for the caller; the failed-payments sweep releases the stock instead."""
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, "a", MUG=2)

    def broker_down(*args, **kwargs):
        raise KombuOperationalError("[Errno 111] Connection refused")

    monkeypatch.setattr(app, "send_task", broker_down)
    assert order_fail_payment(order=order) is True

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAYMENT_FAILED
    assert "Connection refused" in caplog.text
    assert stock_of(mug).reserved == 2  # not yet: the task was never queued
    assert order_release_failed_payments(batch_size=10).done == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 0)
    assert_books_balance(mug)
