"""A charge of another amount or currency than asked waits in ``review``: staff accept it (what it took beyond
the order's total refunded) or refund it all from the payments' admin, and meanwhile the order is not charged
again."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command

from orders.models import Order
from orders.services import order_cancel
from payments.drift import payment_list_refund_drift
from payments.errors import PaymentInReview
from payments.models import Payment
from payments.providers.local import local_event
from tests.conftest import client_for, messages_of, stock_of, webhook_deliver
from tests.orders.services.test_refund_books import charged, provider_refunded
from tests.payments import place, start

pytestmark = pytest.mark.django_db

PAYMENTS = "/admin/payments/payment/"


@pytest.fixture
def in_review(make_variant, customer, provider):
    """An order of 2 mugs (5.00) whose provider charged 20.00: its payment waits in review."""
    mug = make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    charged(payment, "20.00")
    return {"order": order, "payment": Payment.objects.get(pk=payment.pk), "mug": mug}


def decide(client, action: str, payment: Payment):
    return client.post(PAYMENTS, {"action": action, "_selected_action": [payment.pk]}, follow=True)


def test_staff_accept_a_charge_whose_excess_was_refunded_and_the_order_is_paid(in_review, staff_admin, provider):
    order, payment, mug = in_review["order"], in_review["payment"], in_review["mug"]
    provider_refunded(payment, "15.00", event="evt_excess", charged="20.00")  # staff refunded it in the dashboard

    response = decide(staff_admin, "review_accept", payment)

    assert response.status_code == 200
    assert any("Accepted" in message for message in messages_of(response))
    payment.refresh_from_db()
    assert payment.state == Payment.State.CAPTURED and provider.refund_requests == []
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert payment_list_refund_drift() == []
    call_command("reconcile", "--full")


def test_accepting_a_charge_of_more_than_the_total_refunds_the_excess_first(in_review, staff_admin, provider):
    order, payment = in_review["order"], in_review["payment"]

    decide(staff_admin, "review_accept", payment)

    assert provider.refund_requests == [(payment.reference, Decimal("15.00"), f"refund-excess-{payment.reference}")]
    payment.refresh_from_db()
    assert (payment.state, payment.amount_refunded) == (Payment.State.CAPTURED, Decimal("15.00"))
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    provider_refunded(payment, "15.00", event="evt_excess_told", charged="20.00")  # its webhook, later
    assert Order.objects.get(pk=order.pk).amount_refunded == 0 and payment_list_refund_drift() == []
    call_command("reconcile", "--full")


def test_staff_refund_a_charge_in_review_in_full_and_the_buyer_may_pay_again(in_review, staff_admin, provider):
    order, payment = in_review["order"], in_review["payment"]

    response = decide(staff_admin, "review_refund", payment)

    assert any("Refunded" in message for message in messages_of(response))
    payment.refresh_from_db()
    assert (payment.state, payment.amount_refunded) == (Payment.State.REFUNDED, Decimal("20.00"))
    assert provider.refund_requests == [(payment.reference, None, "")]
    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT
    assert start(order).attempt == 2  # paying again is allowed once the charge is decided
    assert payment_list_refund_drift() == []


def test_a_charge_in_another_currency_cannot_be_accepted_only_refunded(make_variant, customer, provider, staff_admin):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = place(customer, "k")
    payment = start(order)
    event = local_event("checkout.session.completed", payment=payment)
    event["data"]["object"]["currency"] = "usd"
    webhook_deliver(event)

    response = decide(staff_admin, "review_accept", payment)

    [refused] = [message for message in messages_of(response) if "charge_not_acceptable" in message]
    assert "charged in USD, the order is in EUR" in refused
    assert Payment.objects.get(pk=payment.pk).state == Payment.State.REVIEW
    assert provider.refund_requests == []


def test_a_decision_needs_the_refund_permission(in_review, client, staff_user, provider):
    staff_user.user_permissions.add(Permission.objects.get(codename="view_payment"))  # not orders.refund_order
    client.force_login(staff_user)

    listed = client.get(PAYMENTS).content.decode()
    response = decide(client, "review_accept", in_review["payment"])

    assert in_review["payment"].reference in listed and "review_accept" not in listed
    assert response.status_code == 200 and provider.refund_requests == []
    assert Payment.objects.get(pk=in_review["payment"].pk).state == Payment.State.REVIEW


def test_an_order_with_a_charge_in_review_is_not_charged_again(in_review, customer, provider, client):
    order = in_review["order"]
    client.force_login(customer)
    page = client.get(f"/orders/{order.number}/").content.decode()
    assert 'data-testid="payment-in-review"' in page and 'data-testid="pay"' not in page

    with pytest.raises(PaymentInReview):
        start(order)
    answer = client_for(customer).post(f"/api/orders/{order.number}/pay/", {}, format="json")

    assert answer.status_code == 409 and answer.json()["code"] == "payment_in_review"
    assert Payment.objects.filter(order=order).count() == 1 and len(provider.checkouts) == 1


def test_a_charge_accepted_after_its_order_lost_its_stock_is_refunded_in_full(in_review, staff_admin, provider):
    order, payment = in_review["order"], in_review["payment"]
    order_cancel(order=order)  # the buyer gave up meanwhile: the order can no longer be paid

    decide(staff_admin, "review_accept", payment)

    payment.refresh_from_db()
    assert (payment.state, payment.amount_refunded) == (Payment.State.REFUNDED, Decimal("20.00"))
    assert [amount for _, amount, _ in provider.refund_requests] == [Decimal("15.00"), None]  # the excess, the rest
    assert Order.objects.get(pk=order.pk).status == Order.Status.CANCELLED
    assert payment_list_refund_drift() == []


def test_a_dashboard_refund_of_all_of_a_charge_in_review_refunds_what_was_charged(in_review, provider):
    payment = in_review["payment"]

    provider_refunded(payment, "20.00", event="evt_all", charged="20.00")

    payment.refresh_from_db()
    assert (payment.state, payment.amount_refunded) == (Payment.State.REFUNDED, Decimal("20.00"))
    assert payment_list_refund_drift() == []


def test_reconcile_reports_a_charge_that_reads_refunded_while_part_of_it_is_still_charged(in_review, capsys):
    payment = in_review["payment"]
    Payment.objects.filter(pk=payment.pk).update(state=Payment.State.REFUNDED, amount_refunded=Decimal("15.00"))

    with pytest.raises(CommandError):
        call_command("reconcile", "--full")

    assert f"DRIFT payment {payment.reference} of order {in_review['order'].number}" in capsys.readouterr().out
    [row] = payment_list_refund_drift()
    assert row.refunded == Decimal("15.00") and row.payment.charge == Decimal("20.00")
