"""Refunds change an order only for the payment that paid it, only once all of it is refunded, and a
restock staff asked for happens exactly once, whoever finishes the refund: staff or the provider's webhook."""

from datetime import timedelta
from decimal import Decimal

import pytest

from inventory.models import StockMovement
from orders.models import Order
from payments.errors import RefundFailed
from payments.models import Payment, PaymentEvent, Refund
from payments.providers.local import local_event
from payments.services import order_refund, payment_event_list_process
from tests.conftest import assert_books_balance, stock_of, webhook_deliver
from tests.payments import place, start, succeed

pytestmark = pytest.mark.django_db


def refunded(payment: Payment, *, minor: int | None = None, event: str = "1") -> None:
    """The provider's ``charge.refunded`` for ``payment``: ``minor`` units refunded so far (all by default)."""
    payment = Payment.objects.get(pk=payment.pk)
    event = local_event("charge.refunded", payment=payment) | {"id": f"evt_refund_{payment.pk}_{event}"}
    charge = event["data"]["object"]
    total = int(payment.amount * 100)
    charge |= {"amount": total, "amount_refunded": total if minor is None else minor, "currency": "eur"}
    charge["refunded"] = charge["amount_refunded"] == total
    webhook_deliver(event)


def paid_order(make_variant, customer, *, stock=5):
    mug = make_variant(sku="MUG", stock=stock, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    succeed(payment)
    return mug, Order.objects.get(pk=order.pk), Payment.objects.get(pk=payment.pk)


def late_second_payment(order: Order) -> Payment:
    """A second payment of an order paid meanwhile by its first (the buyer paid in two tabs)."""
    reference = f"cs_local_second_{order.number}"
    return Payment.objects.create(
        order=order, provider="local", attempt=2, reference=reference, amount=Decimal("5.00"), currency="EUR"
    )


def test_paying_again_while_a_charge_awaits_applying_returns_that_payment(make_variant, customer, provider):
    make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    first = start(order)
    Payment.objects.filter(pk=first.pk).update(state=Payment.State.CHARGED, provider_payment="pi_1")

    again = start(order)

    assert again.pk == first.pk and Payment.objects.count() == 1
    assert len(provider.checkouts) == 1


def test_refunding_a_late_second_payment_leaves_the_order_paid_with_its_first(make_variant, customer, provider):
    mug, order, first = paid_order(make_variant, customer)
    second = late_second_payment(order)

    succeed(second)  # it cannot be applied: the order is paid by the first
    refunded(second)  # the provider confirms that refund

    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.payment_reference == first.reference
    assert provider.refunds == [second.reference]
    assert Payment.objects.get(pk=first.pk).state == Payment.State.CAPTURED
    assert Payment.objects.get(pk=second.pk).state == Payment.State.REFUNDED
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)


def test_a_partial_refund_is_recorded_and_the_order_is_refunded_only_once_all_of_it_is(
    make_variant, customer, provider
):
    mug, order, payment = paid_order(make_variant, customer)

    refunded(payment, minor=200, event="partial")  # a goodwill refund of 2.00 from the provider's dashboard

    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert payment.state == Payment.State.CAPTURED and str(payment.amount_refunded) == "2.00"
    goodwill = Refund.objects.get(order=order)
    assert (goodwill.source, goodwill.amount) == (Refund.Source.PROVIDER, Decimal("2.00"))

    order_refund(order=order, restock=False)  # staff refund the rest
    refunded(payment, event="rest")

    order.refresh_from_db()
    payment.refresh_from_db()
    assert provider.refunds == [payment.reference]
    assert order.status == Order.Status.REFUNDED
    assert payment.state == Payment.State.REFUNDED and str(payment.amount_refunded) == "5.00"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)


def test_a_restock_asked_for_happens_once_when_the_refund_webhook_arrives_first(make_variant, customer, provider):
    mug, order, payment = paid_order(make_variant, customer)
    provider.during_refund = refunded  # the provider's webhook is processed before staff's refund returns

    order_refund(order=order, restock=True)
    refunded(payment, event="again")  # delivered again later: nothing more

    order.refresh_from_db()
    assert order.status == Order.Status.REFUNDED
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 0)
    assert StockMovement.objects.filter(kind="restock", reason="refund_restock").count() == 1
    assert_books_balance(mug)


def test_staff_refund_the_payment_that_paid_the_order_not_a_later_one(make_variant, customer, provider):
    mug, order, first = paid_order(make_variant, customer)
    second = late_second_payment(order)
    Payment.objects.filter(pk=second.pk).update(state=Payment.State.REFUNDING, provider_payment="pi_second")

    order_refund(order=order, restock=False)

    assert provider.refunds == [first.reference]
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert Payment.objects.get(pk=first.pk).state == Payment.State.REFUNDED
    assert Payment.objects.get(pk=second.pk).state == Payment.State.REFUNDING  # left to its own settling


def test_a_refund_that_arrives_before_its_success_is_kept_and_the_success_never_pays_the_order(
    make_variant, customer, provider
):
    mug = make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    success = local_event("checkout.session.completed", payment=payment)

    refunded(payment)  # Stripe sends events out of order: the refund first
    webhook_deliver(success)

    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert Payment.objects.get(pk=payment.pk).state == Payment.State.REFUNDED
    assert provider.refunds == []  # refunded already: nothing to refund again
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 2)


def test_a_refund_whose_variant_was_deleted_since_is_recorded_and_the_rest_restocked(
    make_variant, customer, provider, caplog
):
    mug, order, payment = paid_order(make_variant, customer)
    mug.delete()  # staff took the product off the catalog after the sale

    order_refund(order=order, restock=True)

    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert Payment.objects.get(pk=payment.pk).state == Payment.State.REFUNDED
    assert "2 unit(s) of MUG not restocked" in caplog.text
    assert not StockMovement.objects.filter(reason="refund_restock").exists()


def test_a_refund_the_provider_refuses_changes_nothing_and_says_so(make_variant, customer, provider):
    mug, order, payment = paid_order(make_variant, customer)

    def refuse(_payment):
        raise ConnectionError("provider down")

    provider.during_refund = refuse
    with pytest.raises(RefundFailed):
        order_refund(order=order, restock=True)

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert Payment.objects.get(pk=payment.pk).state == Payment.State.CAPTURED
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert order_refund(order=order, restock=True).status == Order.Status.REFUNDED  # staff try again
    assert stock_of(mug).on_hand == 5


def test_a_refund_naming_only_a_payment_intent_not_seen_yet_is_kept_and_applied_by_the_sweep(
    make_variant, customer, provider
):
    mug = make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    success = local_event("checkout.session.completed", payment=payment)
    refund = local_event("charge.refunded", payment=payment)
    del refund["data"]["object"]["metadata"]  # a provider object that carries no metadata of ours

    webhook_deliver(refund)  # before its success: the payment intent is not known yet
    assert PaymentEvent.objects.get(type="charge.refunded").processed_at is None
    webhook_deliver(success)
    payment_event_list_process(older_than=timedelta(0))  # the sweep tries the kept event again

    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert Payment.objects.get(pk=payment.pk).state == Payment.State.REFUNDED
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)  # sold, then refunded without restock
