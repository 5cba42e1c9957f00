"""Paying: a payment started with the provider outside the stock lock, then decided by its webhooks, which
arrive late, twice or out of order; the first final outcome wins and a charge that cannot be applied is refunded."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from inventory.models import StockMovement
from orders.errors import OrderNotFound
from orders.models import Order
from orders.services import order_cancel, order_expire, order_place
from payments.models import Payment, PaymentEvent
from payments.providers.local import local_event
from payments.services import payment_event_list_process, payment_list_expire_checkouts
from shop.errors import ProductUnavailable
from tests.conftest import assert_books_balance, pay, stock_of, webhook_deliver
from tests.payments import fail, place, start, succeed

pytestmark = pytest.mark.django_db


def test_the_provider_is_called_with_no_stock_lock_held_and_the_payment_recorded_pending(
    make_variant, customer, provider
):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")

    payment = start(order)

    assert provider.checkouts == [{"order": order.number, "locks_held": frozenset()}]
    assert (payment.state, payment.amount, payment.provider, payment.attempt) == ("pending", 5, "local", 1)
    assert payment.redirect_url == f"/payments/local/{payment.reference}/"
    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT


def test_a_second_click_during_the_first_returns_the_same_payment(make_variant, customer, provider):
    make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    clicked_again = []
    provider.during_checkout = lambda o: clicked_again.append(start(o))  # lands while the first is at the provider

    payment = start(order)

    assert clicked_again == [payment] and Payment.objects.count() == 1
    assert start(order) == payment  # and any later click, while it is pending


def test_a_paid_order_is_paid_once_and_paying_again_returns_its_payment(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)

    succeed(payment)
    succeed(payment)  # the same event delivered again: stored once, applied once

    paid = Order.objects.get(pk=order.pk)
    assert paid.status == Order.Status.PAID and paid.payment_reference == payment.reference
    assert start(paid).state == Payment.State.CAPTURED and provider.refunds == []
    assert PaymentEvent.objects.count() == 1
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)


def test_a_success_after_the_sweeper_expired_the_order_reserves_its_lines_again(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert order_expire(order=order)

    succeed(payment)

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID and provider.refunds == []
    assert list(StockMovement.objects.filter(order=order).values_list("kind", flat=True)) == [
        "reserve",
        "release",
        "reserve",
        "commit",
    ]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)


def test_a_success_after_expiry_when_the_stock_is_gone_is_refunded(make_variant, customer, bob, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert order_expire(order=order)
    place(bob, "bob", quantity=4)  # takes what the expiry gave back

    succeed(payment)

    assert Order.objects.get(pk=order.pk).status == Order.Status.EXPIRED
    assert Payment.objects.get().state == Payment.State.REFUNDED and provider.refunds == [payment.reference]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 4)
    assert_books_balance(mug)


def test_a_success_for_an_order_cancelled_meanwhile_is_refunded(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    order_cancel(order=order)

    succeed(payment)

    assert Order.objects.get(pk=order.pk).status == Order.Status.CANCELLED
    assert provider.refunds == [payment.reference] and Payment.objects.get().state == Payment.State.REFUNDED
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


@pytest.mark.parametrize("first", ["success", "failure"])
def test_success_and_failure_in_either_order_end_in_the_state_of_the_first(make_variant, customer, provider, first):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    outcomes = [succeed, fail] if first == "success" else [fail, succeed]

    for outcome in outcomes:
        outcome(payment)

    order.refresh_from_db()
    if first == "success":
        assert order.status == Order.Status.PAID and Payment.objects.get().state == Payment.State.CAPTURED
        assert provider.refunds == [] and (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    else:  # the late success took money for an order that failed: it goes back
        assert order.status == Order.Status.PAYMENT_FAILED and Payment.objects.get().state == Payment.State.REFUNDED
        assert provider.refunds == [payment.reference] and stock_of(mug).on_hand == 5
    assert PaymentEvent.objects.filter(processed_at__isnull=False).count() == 2
    assert_books_balance(mug)


def test_unknown_event_types_are_ignored_and_unknown_payments_are_kept_for_a_while(
    make_variant, customer, provider, settings
):
    make_variant(sku="MUG", stock=5)
    payment = start(place(customer, "k"))
    webhook_deliver({"id": "evt_1", "type": "customer.created", "data": {"object": {"object": "customer"}}})
    stranger = {"object": "checkout.session", "id": "cs_not_ours", "payment_status": "paid"}
    webhook_deliver({"id": "evt_2", "type": "checkout.session.completed", "data": {"object": stranger}})

    assert list(PaymentEvent.objects.filter(processed_at=None).values_list("event_id", flat=True)) == ["evt_2"]
    settings.PAYMENT_EVENT_MATCH_SECONDS = 0  # it stayed a stranger for longer than that: given up
    payment_event_list_process(older_than=timedelta(0))

    assert PaymentEvent.objects.filter(processed_at__isnull=False).count() == 2
    assert Payment.objects.get() == payment and payment.state == Payment.State.PENDING


def test_an_expired_order_of_a_variant_no_longer_for_sale_is_not_reserved_again(make_variant, customer):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    order_expire(order=order)
    mug.is_active = False
    mug.save()

    with pytest.raises(ProductUnavailable):
        start(order)
    assert Order.objects.get(pk=order.pk).status == Order.Status.EXPIRED
    assert stock_of(mug).reserved == 0 and not Payment.objects.exists()


def test_a_deleted_order_can_be_neither_paid_nor_cancelled(make_variant, customer):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    order.delete()
    for action in (start, lambda o: order_cancel(order=o)):
        with pytest.raises(OrderNotFound) as error:
            action(order)
        assert error.value.code == "order_not_found"
    assert stock_of(mug).reserved == 2


def test_guest_keys_are_scoped_by_email(make_variant):
    mug = make_variant(sku="MUG", stock=10)
    items = [{"sku": "MUG", "quantity": 1}]
    ann = order_place(email="Ann@Example.com", items=items, idempotency_key="checkout-1")
    bob = order_place(email="bob@example.com", items=items, idempotency_key="checkout-1")
    again = order_place(email="ann@example.com ", items=items, idempotency_key="checkout-1")

    assert ann.pk != bob.pk and again.pk == ann.pk
    assert ann.email == "ann@example.com"
    assert stock_of(mug).reserved == 2


@pytest.mark.parametrize("email", ["", None, "not-an-email", "a" * 250 + "@example.com", 42])
def test_a_guest_needs_a_valid_email(make_variant, email):
    mug = make_variant(sku="MUG", stock=10)
    with pytest.raises(InvalidInput) as error:
        order_place(email=email, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")
    assert "email" in error.value.payload["fields"]
    assert stock_of(mug).reserved == 0 and not Order.all_objects.exists()


def test_a_provider_that_fails_to_start_a_checkout_changes_nothing(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")

    def broken(order):
        raise ConnectionError("provider down")

    provider.during_checkout = broken
    with pytest.raises(ConnectionError):
        start(order)
    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT
    assert stock_of(mug).reserved == 2 and not Payment.objects.exists()
    assert pay(order).status == Order.Status.PAID  # the buyer clicks again


def test_the_sweep_expires_the_checkouts_of_orders_that_can_no_longer_be_paid(
    make_variant, customer, provider, settings
):
    make_variant(sku="MUG", stock=20)
    cancelled, long_expired, just_expired, open_ = (start(place(customer, key, quantity=1)) for key in "abcd")
    order_cancel(order=cancelled.order)
    for payment in (long_expired, just_expired):
        Order.objects.filter(pk=payment.order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        order_expire(order=payment.order)
    window = timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS + 1)
    Order.objects.filter(pk=long_expired.order.pk).update(expires_at=timezone.now() - window)

    assert payment_list_expire_checkouts() == 2

    assert sorted(provider.expired) == sorted([cancelled.reference, long_expired.reference])


def test_a_checkout_that_closed_unpaid_leaves_the_order_payable_again(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    first = start(order)

    webhook_deliver(local_event("checkout.session.expired", payment=first))

    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT
    assert Payment.objects.get(pk=first.pk).state == Payment.State.FAILED
    second = start(order)
    assert second.attempt == 2 and stock_of(mug).reserved == 2
