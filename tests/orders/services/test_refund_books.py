"""The order's refunds agree with what the provider says it refunded of the payment (``payment_list_refund_drift``),
whatever order the provider's events and the shop's own refunds arrive in, and ``reconcile`` reports where not."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from orders.models import Order
from orders.services import order_cancel
from payments.drift import payment_list_refund_drift
from payments.errors import RefundFailed
from payments.models import Payment, PaymentEvent, Refund
from payments.providers.local import local_event
from payments.services import order_refund, payment_event_list_process
from tests.conftest import webhook_deliver
from tests.payments import place, start, succeed

pytestmark = pytest.mark.django_db


def provider_refunded(payment: Payment, amount: str, *, event: str, charged: str | None = None) -> None:
    """The provider's ``charge.refunded``: ``amount`` of the charge refunded so far (of ``charged``, if it took
    another amount than asked)."""
    payment = Payment.objects.get(pk=payment.pk)
    webhook = local_event("charge.refunded", payment=payment, refunded=Decimal(amount)) | {"id": event}
    if charged is not None:
        charge = webhook["data"]["object"]
        charge["amount"] = int(Decimal(charged) * 100)
        charge["refunded"] = charge["amount_refunded"] == charge["amount"]
    webhook_deliver(webhook)


def charged(payment: Payment, amount: str) -> None:
    """The provider's success, having charged ``amount`` (another amount than asked puts it in review)."""
    event = local_event("checkout.session.completed", payment=payment)
    event["data"]["object"]["amount_total"] = int(Decimal(amount) * 100)
    webhook_deliver(event)


def books_of(order: Order) -> tuple[Decimal, Decimal, Decimal]:
    """The order's refunded amount, its refunds' sum (not failed), and what the provider says of its payment."""
    order.refresh_from_db()
    refunds = sum(r.amount for r in Refund.objects.filter(order=order).exclude(state=Refund.State.FAILED))
    payment = Payment.objects.get(reference=order.payment_reference)
    return order.amount_refunded, Decimal(refunds), payment.amount_refunded


def test_a_partial_refund_reported_before_the_success_is_recorded_on_the_order_once_it_is_paid(
    make_variant, customer, provider
):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")  # 2 mugs: 5.00
    payment = start(order)

    provider_refunded(payment, "1.00", event="evt_goodwill")  # made in the dashboard, reported first
    succeed(payment)

    assert books_of(order) == (Decimal("1.00"), Decimal("1.00"), Decimal("1.00"))
    [goodwill] = Refund.objects.filter(order=order)
    assert (goodwill.source, goodwill.state) == (Refund.Source.PROVIDER, Refund.State.SUCCEEDED)
    assert payment_list_refund_drift() == []

    order = order_refund(order=order, restock=False)  # "refund the rest"

    assert provider.refund_requests[-1][1] == Decimal("4.00")
    assert order.status == Order.Status.REFUNDED and order.amount_refunded == Decimal("5.00")
    assert payment_list_refund_drift() == []


def test_a_dashboard_refund_during_a_staff_refund_the_provider_refuses_stays_recorded(paid, provider):
    order = paid["order"]  # 27.50
    payment = Payment.objects.get(reference=order.payment_reference)

    def dashboard_refund_then_refuse(_payment):
        provider_refunded(payment, "3.00", event="evt_dashboard")  # arrives while our 2.50 is claimed
        raise ConnectionError("the provider refuses our 2.50")

    provider.during_refund = dashboard_refund_then_refuse
    with pytest.raises(RefundFailed):
        order_refund(order=order, quantities={"MUG": 1}, restock=False)

    assert books_of(order) == (Decimal("3.00"), Decimal("3.00"), Decimal("3.00"))
    assert payment_list_refund_drift() == []
    call_command("reconcile", "--full")


def test_a_refund_event_without_a_currency_is_kept_for_staff_and_the_next_one_records_it(paid, caplog):
    order = paid["order"]
    payment = Payment.objects.get(reference=order.payment_reference)
    unreadable = local_event("charge.refunded", payment=payment, refunded=Decimal("1.00")) | {"id": "evt_no_currency"}
    del unreadable["data"]["object"]["currency"]

    webhook_deliver(unreadable)
    payment_event_list_process(older_than=timedelta(0))  # the sweep: still unreadable

    assert PaymentEvent.objects.get(event_id="evt_no_currency").processed_at is None
    assert any(r.levelname == "ERROR" and "evt_no_currency" in r.getMessage() for r in caplog.records)
    assert books_of(order) == (0, 0, 0)

    provider_refunded(payment, "1.00", event="evt_with_currency")  # Stripe's totals are cumulative

    assert books_of(order) == (Decimal("1.00"), Decimal("1.00"), Decimal("1.00"))


def test_a_refund_of_the_excess_of_a_charge_in_review_leaves_it_in_review_with_the_rest_charged(
    make_variant, customer, provider
):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")  # 5.00
    payment = start(order)
    charged(payment, "20.00")

    provider_refunded(payment, "15.00", event="evt_excess", charged="20.00")

    payment.refresh_from_db()
    assert payment.state == Payment.State.REVIEW
    assert (payment.charged_amount, payment.amount_refunded) == (Decimal("20.00"), Decimal("15.00"))
    assert payment_list_refund_drift() == []


def test_the_same_refund_event_replayed_and_a_stale_total_change_nothing(paid, provider):
    order = paid["order"]
    payment = Payment.objects.get(reference=order.payment_reference)

    provider_refunded(payment, "3.00", event="evt_a")
    provider_refunded(payment, "3.00", event="evt_a")  # the same event again
    provider_refunded(payment, "2.00", event="evt_older")  # an older total, delivered late

    assert books_of(order) == (Decimal("3.00"), Decimal("3.00"), Decimal("3.00"))
    assert Refund.objects.filter(order=order).count() == 1


def test_a_refund_event_for_more_than_was_charged_records_the_charge_and_no_more(paid, provider):
    order = paid["order"]
    payment = Payment.objects.get(reference=order.payment_reference)
    event = local_event("charge.refunded", payment=payment, refunded=Decimal("20.00")) | {"id": "evt_too_much"}
    event["data"]["object"]["amount_refunded"] = 99999

    webhook_deliver(event)

    assert books_of(order) == (Decimal("27.50"), Decimal("27.50"), Decimal("27.50"))
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED


def test_a_dashboard_refund_of_everything_on_a_partly_refunded_order_refunds_the_rest(paid, provider):
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 1}, restock=False)
    payment = Payment.objects.get(reference=order.payment_reference)

    provider_refunded(payment, "27.50", event="evt_all")

    assert books_of(order) == (Decimal("27.50"), Decimal("27.50"), Decimal("27.50"))
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert payment_list_refund_drift() == []


def test_a_staff_refund_counts_on_the_payment_before_its_webhook_arrives(paid, provider):
    order = order_refund(order=paid["order"], quantities={"TEE": 1}, restock=False)

    assert books_of(order) == (Decimal("20.00"), Decimal("20.00"), Decimal("20.00"))
    assert payment_list_refund_drift() == []


def test_reconcile_full_reports_a_payment_whose_refunds_the_order_does_not_book(paid, provider, capsys):
    order = paid["order"]
    call_command("reconcile", "--full")
    Payment.objects.filter(reference=order.payment_reference).update(amount_refunded=Decimal("1.00"))

    with pytest.raises(CommandError) as refused:
        call_command("reconcile", "--full")

    assert refused.value.returncode == 1
    out = capsys.readouterr().out
    assert f"DRIFT payment {order.payment_reference} of order {order.number}: the provider refunded 1.00" in out
    [row] = payment_list_refund_drift()
    assert (row.refunded, row.booked) == (Decimal("1.00"), Decimal("0"))


def test_a_part_refunded_before_a_success_that_cannot_be_applied_is_refunded_in_full(make_variant, customer, provider):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    provider_refunded(payment, "1.00", event="evt_goodwill")
    order_cancel(order=order)

    succeed(payment)  # the order can no longer be paid: the rest of the charge goes back

    payment.refresh_from_db()
    assert (payment.state, payment.amount_refunded) == (Payment.State.REFUNDED, Decimal("5.00"))
    assert provider.refund_requests == [(payment.reference, None, "")]
    assert not Refund.objects.exists() and payment_list_refund_drift() == []
