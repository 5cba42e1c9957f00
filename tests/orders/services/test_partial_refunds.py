"""Refunds by line: chosen units and the shipping, restocked or not, never more than was paid, also when
refunds race each other or the provider's webhook; what the provider refunded on its own is recorded."""

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Sum

from core.errors import DomainError, InvalidInput
from fulfilment.emails import order_email_list_send
from inventory.models import StockMovement
from orders.models import Order, OrderLine
from orders.services import order_place
from payments.errors import OrderNotRefundable, RefundExceedsOrder, RefundFailed
from payments.models import Payment, Refund
from payments.providers.local import local_event
from payments.services import order_refund, refund_list_settle
from payments.services.refunds import refund_claim
from tests.conftest import ADDRESS_DE, assert_books_balance, pay, stock_of, webhook_deliver
from tests.orders.conftest import refunded_units
from tests.race import run_parallel, wait_for_peers
from tests.smtp import html_of, text_of

pytestmark = pytest.mark.django_db


def provider_says_refunded(order: Order, amount: str, *, event: str) -> None:
    """The provider's ``charge.refunded``: ``amount`` of the order's payment refunded so far, in all."""
    payment = Payment.objects.get(order=order, reference=order.payment_reference)
    webhook_deliver(local_event("charge.refunded", payment=payment, refunded=Decimal(amount)) | {"id": event})


def test_some_units_with_restock_then_the_rest_without_and_the_ledger_names_the_order_and_line(
    paid, provider, staff_user
):
    order, mug, tee = paid["order"], paid["mug"], paid["tee"]

    after = order_refund(order=order, quantities={"MUG": 1}, restock=True, actor=staff_user)

    assert after.status == Order.Status.PAID and after.amount_refunded == Decimal("2.50")
    assert refunded_units(order) == {"MUG": 1, "TEE": 0}
    [(reference, amount, key)] = provider.refund_requests
    assert (reference, amount) == (order.payment_reference, Decimal("2.50")) and key
    [restocked] = StockMovement.objects.filter(reason="refund_restock")
    mug_line = OrderLine.objects.get(order=order, variant=mug)
    assert (restocked.order_id, restocked.order_line_id, restocked.on_hand_delta) == (order.pk, mug_line.pk, 1)
    assert restocked.actor == staff_user and stock_of(mug).on_hand == 8

    after = order_refund(order=after, restock=False)  # the rest: 2 mugs and the tee

    assert after.status == Order.Status.REFUNDED and after.amount_refunded == after.total == Decimal("27.50")
    assert [amount for _, amount, _ in provider.refund_requests] == [Decimal("2.50"), Decimal("25.00")]
    assert refunded_units(order) == {"MUG": 3, "TEE": 1}
    assert Payment.objects.get(reference=order.payment_reference).state == Payment.State.REFUNDED
    assert (stock_of(mug).on_hand, stock_of(tee).on_hand) == (8, 4)  # the rest stays sold
    assert order_refund(order=after, restock=True).amount_refunded == Decimal("27.50")  # again: nothing more
    assert len(provider.refund_requests) == 2
    assert_books_balance(mug, tee)
    call_command("reconcile")  # raises if the books do not balance


def test_refunds_unit_by_unit_with_tax_voucher_and_shipping_add_up_to_what_was_paid_to_the_cent(
    make_variant, make_voucher, shipping_rules, provider, settings
):
    settings.PRICES_INCLUDE_TAX = False
    make_variant(sku="MUG", stock=10, price="11.90", requires_shipping=True, weight_grams=400)
    make_variant(sku="BOOK", stock=10, price="21.40", requires_shipping=True, weight_grams=600)
    make_voucher(code="TAKE7", kind="percentage", value="7")
    order = order_place(
        email="ann@example.com",
        items=[{"sku": "MUG", "quantity": 3}, {"sku": "BOOK", "quantity": 1}],
        idempotency_key="k",
        shipping_address=ADDRESS_DE,
        shipping_method=shipping_rules["express"].pk,
        voucher="TAKE7",
    )
    order = pay(order)
    mug_line = order.lines.get(variant__sku="MUG")
    mug_paid = mug_line.line_total - mug_line.discount + mug_line.tax
    assert order.discount > 0 and order.tax > 0 and order.shipping_price == Decimal("9.90")

    for _ in range(3):
        order = order_refund(order=order, quantities={"MUG": 1}, restock=False)
    order = order_refund(order=order, quantities={}, shipping=True, restock=False)
    with pytest.raises(RefundExceedsOrder):  # the shipping once only
        order_refund(order=order, quantities={}, shipping=True, restock=False)
    order = order_refund(order=order, quantities={"BOOK": 1}, restock=False)

    amounts = [amount for _, amount, _ in provider.refund_requests]
    assert sum(amounts[:3]) == mug_paid and max(amounts[:3]) - min(amounts[:3]) <= Decimal("0.01")
    assert amounts[3] == order.shipping_price + order.shipping_tax
    assert sum(amounts) == order.total and order.status == Order.Status.REFUNDED


@pytest.mark.parametrize(
    "quantities, error",
    [
        ({"MUG": 4}, RefundExceedsOrder),
        ({"NOPE": 1}, InvalidInput),
        ({"MUG": 0}, InvalidInput),
        ({"MUG": -1}, InvalidInput),
        ({"MUG": True}, InvalidInput),
        ({"MUG": "1"}, InvalidInput),
        ({}, InvalidInput),  # nothing asked, and no shipping
    ],
)
def test_a_bad_refund_is_refused_and_refunds_nothing(paid, provider, quantities, error):
    order = paid["order"]

    with pytest.raises(error):
        order_refund(order=order, quantities=quantities, restock=True)

    assert Order.objects.get(pk=order.pk).amount_refunded == 0 and refunded_units(order) == {"MUG": 0, "TEE": 0}
    assert not Refund.objects.exists() and provider.refund_requests == []
    assert stock_of(paid["mug"]).on_hand == 7


def test_an_unpaid_order_is_not_refundable(make_variant, provider):
    make_variant(sku="MUG", stock=5)
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")

    with pytest.raises(OrderNotRefundable):
        order_refund(order=order, quantities={"MUG": 1}, restock=True)
    assert not Refund.objects.exists()


def test_a_partial_refund_the_provider_refuses_gives_its_claim_back_and_can_be_tried_again(paid, provider):
    order, mug = paid["order"], paid["mug"]

    def refuse(_payment):
        raise ConnectionError("provider down")

    provider.during_refund = refuse
    with pytest.raises(RefundFailed):
        order_refund(order=order, quantities={"MUG": 2}, restock=True)

    order.refresh_from_db()
    assert order.amount_refunded == 0 and refunded_units(order) == {"MUG": 0, "TEE": 0}
    assert Refund.objects.get().state == Refund.State.FAILED and stock_of(mug).on_hand == 7
    assert order_refund(order=order, quantities={"MUG": 2}, restock=True).amount_refunded == Decimal("5.00")
    assert stock_of(mug).on_hand == 9
    assert_books_balance(mug)


def test_a_partial_refund_made_at_the_provider_is_recorded_as_that_amount_not_a_full_refund(paid, provider):
    order = paid["order"]

    provider_says_refunded(order, "1.00", event="evt_goodwill")  # a goodwill refund from Stripe's dashboard
    provider_says_refunded(order, "1.00", event="evt_goodwill_again")  # the same total, told again

    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.amount_refunded == Decimal("1.00")
    [goodwill] = Refund.objects.all()
    assert (goodwill.source, goodwill.state, goodwill.amount, goodwill.lines.count()) == (
        Refund.Source.PROVIDER, Refund.State.SUCCEEDED, Decimal("1.00"), 0,
    )  # fmt: skip
    assert Payment.objects.get(reference=order.payment_reference).amount_refunded == Decimal("1.00")

    order = order_refund(order=order, restock=False)  # staff refund the rest: what is left of the payment

    assert provider.refund_requests[-1][1] == Decimal("26.50")
    assert order.status == Order.Status.REFUNDED and order.amount_refunded == order.total


def test_a_full_refund_made_at_the_provider_refunds_every_line_left(paid, provider):
    order = paid["order"]
    order_refund(order=order, quantities={"TEE": 1}, restock=True)

    provider_says_refunded(order, "27.50", event="evt_all")  # the rest, from the dashboard

    order.refresh_from_db()
    assert order.status == Order.Status.REFUNDED and order.amount_refunded == Decimal("27.50")
    assert refunded_units(order) == {"MUG": 3, "TEE": 1}
    rest = Refund.objects.get(source=Refund.Source.PROVIDER)
    assert (rest.amount, rest.restock, [line.quantity for line in rest.lines.all()]) == (Decimal("7.50"), False, [3])


def test_the_providers_webhook_arriving_before_the_refund_returns_changes_nothing_more(paid, provider):
    order, mug = paid["order"], paid["mug"]
    provider.during_refund = lambda _payment: provider_says_refunded(order, "5.00", event="evt_early")

    after = order_refund(order=order, quantities={"MUG": 2}, restock=True)
    provider_says_refunded(order, "5.00", event="evt_late")  # delivered again later

    assert after.amount_refunded == Decimal("5.00") and after.status == Order.Status.PAID
    [refund] = Refund.objects.all()
    assert (refund.state, refund.source) == (Refund.State.SUCCEEDED, Refund.Source.STAFF)
    assert StockMovement.objects.filter(reason="refund_restock").count() == 1 and stock_of(mug).on_hand == 9
    assert_books_balance(mug)


class Died(BaseException):
    """The caller's process stops right after the provider refunded (not an error it could handle)."""


def test_a_refund_whose_caller_stopped_after_the_provider_refunded_is_finished_by_the_sweep(paid, provider):
    order, mug = paid["order"], paid["mug"]

    def die(_payment):
        raise Died

    provider.during_refund = die
    with pytest.raises(Died):
        order_refund(order=order, quantities={"MUG": 1}, restock=True)
    assert Refund.objects.get().state == Refund.State.REQUESTED and stock_of(mug).on_hand == 7

    assert refund_list_settle(older_than=timedelta(0)) == 1

    assert Refund.objects.get().state == Refund.State.SUCCEEDED and stock_of(mug).on_hand == 8
    first, again = provider.refund_requests
    assert first == again  # the same amount and key: the provider refunds once
    assert refund_list_settle(older_than=timedelta(0)) == 0


def _refund_one_mug(order_id: int) -> str:
    wait_for_peers()
    try:
        order_refund(order=Order.objects.get(pk=order_id), quantities={"MUG": 1}, restock=True)
    except DomainError as refusal:
        return refusal.code
    return "refunded"


def _provider_refunds_it_all(order_id: int) -> str:
    wait_for_peers()
    provider_says_refunded(Order.objects.get(pk=order_id), "27.50", event="evt_dashboard_all")
    return "provider"


@pytest.mark.django_db(transaction=True)
def test_staff_refunding_the_same_units_at_once_refund_each_once(paid):
    order, mug = paid["order"], paid["mug"]

    answers = run_parallel(_refund_one_mug, [{"order_id": order.pk}] * 6, processes=6, barrier=True)

    assert sorted(answers) == ["refund_exceeds_order"] * 3 + ["refunded"] * 3
    order.refresh_from_db()
    assert order.amount_refunded == Decimal("7.50") and refunded_units(order) == {"MUG": 3, "TEE": 0}
    assert Refund.objects.filter(state=Refund.State.SUCCEEDED).count() == 3
    assert StockMovement.objects.filter(reason="refund_restock").count() == 3 and stock_of(mug).on_hand == 10
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_refunds_racing_a_full_refund_at_the_provider_never_add_up_to_more_than_was_paid(paid):
    order = paid["order"]
    jobs = [(_refund_one_mug, {"order_id": order.pk})] * 4 + [(_provider_refunds_it_all, {"order_id": order.pk})]

    answers = run_parallel(_call, [{"job": job} for job in jobs], processes=5, barrier=True)

    order.refresh_from_db()
    made = Refund.objects.exclude(state=Refund.State.FAILED).aggregate(sum=Sum("amount"))["sum"]
    assert order.status == Order.Status.REFUNDED and made == order.amount_refunded == order.total
    assert refunded_units(order) == {"MUG": 3, "TEE": 1}
    assert "provider" in answers
    assert set(answers) <= {"provider", "refunded", "refund_exceeds_order", "order_not_refundable"}
    assert_books_balance(paid["mug"], paid["tee"])


def _call(job):
    func, kwargs = job
    return func(**kwargs)


@pytest.mark.django_db(transaction=True)
def test_a_provider_refund_waits_for_the_order_before_it_holds_the_payment_a_claim_needs(paid):
    """A staff claim holds the order's row, then records its refund, whose key takes a share lock on the
    payment's row. The provider's webhook arriving meanwhile waits for the order's row before it writes
    the payment: both finish, neither is chosen as a deadlock's victim."""
    order = paid["order"]
    webhook_errors = []

    def webhook():
        try:
            provider_says_refunded(order, "27.50", event="evt_dashboard_all")
        except Exception as error:
            webhook_errors.append(error)
        finally:
            connection.close()

    with transaction.atomic():
        Order.all_objects.select_for_update().get(pk=order.pk)
        thread = threading.Thread(target=webhook)
        thread.start()
        _wait_until_another_connection_waits_for_a_row_lock()
        refund = refund_claim(order, quantities={"MUG": 1}, restock=False)
    thread.join(timeout=30)

    assert not thread.is_alive() and webhook_errors == []
    order.refresh_from_db()
    assert order.amount_refunded == order.total and Refund.objects.get(pk=refund.pk).amount == Decimal("2.50")


def _wait_until_another_connection_waits_for_a_row_lock(seconds: float = 10) -> None:
    with connection.cursor() as cursor:
        for _ in range(int(seconds / 0.05)):
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.processlist "
                "WHERE id <> CONNECTION_ID() AND info LIKE '%%FOR UPDATE'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"no connection waited for a row lock within {seconds} s")


def test_each_refund_is_emailed_once_and_the_last_says_the_order_is_refunded(paid, inbox):
    order = paid["order"]
    order_email_list_send()
    inbox.take()  # placed and paid

    order_refund(order=order, quantities={"MUG": 2}, restock=False)
    assert order_email_list_send() == 1
    order_refund(order=order, restock=False)
    assert order_email_list_send() == 1 and order_email_list_send() == 0

    first, last = inbox.take()
    assert first["Subject"] == f"Order {order.number}: €5.00 refunded"
    assert "2 x Logo mug (MUG)" in text_of(first) and "2 x Logo mug (MUG)" in html_of(first)
    assert last["Subject"] == f"Order {order.number}: refunded"
    assert "refunded in full" in text_of(last) and "1 x Black tee (TEE)" in text_of(last)


def test_reconcile_finds_refunded_amounts_and_units_that_the_refunds_do_not_explain(paid, provider, capsys):
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 1}, restock=False)
    call_command("reconcile")

    Order.objects.filter(pk=order.pk).update(amount_refunded=Decimal("3.50"))
    OrderLine.objects.filter(order=order, variant=paid["tee"]).update(quantity_refunded=1)

    with pytest.raises(CommandError):
        call_command("reconcile")
    out = capsys.readouterr().out
    assert f"DRIFT order {order.number}: refunded 3.50, refunds 2.50" in out
    assert f"DRIFT order {order.number} TEE: 1 unit(s) refunded, refunds 0" in out
