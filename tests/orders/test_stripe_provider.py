"""The Stripe provider, through the official library, against a local fake of the Stripe endpoints it uses.

The fake answers ``POST /v1/checkout/sessions`` and ``POST /v1/refunds`` as Stripe does, honouring
``Idempotency-Key`` (a repeated key gets the first answer, and nothing new happens), and records every
request. Webhooks are signed as Stripe signs them and go through the shop's endpoint.
"""

import json
import secrets
import threading
from datetime import timedelta
from decimal import Decimal
from http.server import ThreadingHTTPServer

import pytest
from django.conf import settings

from core.errors import DomainError
from orders.models import Order
from orders.services import order_cancel, order_place
from payments.models import Payment, PaymentEvent, Refund
from payments.providers.stripe import webhook_sign
from payments.services import order_pay, order_refund, payment_event_process
from shipping.models import ShippingMethod
from tests.conftest import ADDRESS_DE, assert_books_balance, stock_of
from tests.stripe_fake import FakeStripe

pytestmark = pytest.mark.django_db


@pytest.fixture
def stripe_api(settings):
    FakeStripe.requests, FakeStripe.answers = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeStripe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.PAYMENT_PROVIDER = "stripe"
    settings.STRIPE_API_BASE = f"http://127.0.0.1:{server.server_port}"
    settings.STRIPE_SECRET_KEY = "sk_test_fake"
    yield FakeStripe
    server.shutdown()


def stripe_webhook(client, event_type: str, obj: dict) -> int:
    event = {"id": f"evt_{secrets.token_hex(8)}", "object": "event", "type": event_type, "data": {"object": obj}}
    payload = json.dumps(event).encode()
    signature = webhook_sign(payload, secret=settings.STRIPE_WEBHOOK_SECRET)
    response = client.post(
        "/payments/stripe/webhook/", payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature
    )
    payment_event_process(event=PaymentEvent.objects.get(event_id=event["id"]))  # as its task does
    return response.status_code


def paid_through_stripe(client, *, quantity: int, payment_intent: str) -> tuple[Order, Payment]:
    """An order paid as Stripe tells it: its checkout started, then its signed completion delivered."""
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": quantity}], idempotency_key="k")
    payment = order_pay(order=order, return_url="https://shop.example.com/")
    session = {
        "object": "checkout.session",
        "id": payment.reference,
        "payment_status": "paid",
        "payment_intent": payment_intent,
        "amount_total": int(payment.amount * 100),
        "currency": "eur",
    }
    assert stripe_webhook(client, "checkout.session.completed", session) == 200
    return Order.objects.get(pk=order.pk), payment


def test_paying_creates_one_checkout_session_for_the_total_and_a_second_click_reuses_it(make_variant, stripe_api):
    make_variant(sku="MUG", stock=5, price="12.50")
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    payment = order_pay(order=order, return_url="https://shop.example.com/orders/X/")
    again = order_pay(order=order, return_url="https://shop.example.com/orders/X/")

    assert again == payment and payment.provider == "stripe" and payment.reference.startswith("cs_test_")
    assert payment.redirect_url == f"https://checkout.stripe.com/c/pay/{payment.reference}"
    [sent] = stripe_api.requests
    body = sent["body"]
    assert sent["path"] == "/v1/checkout/sessions" and sent["auth"] == "Bearer sk_test_fake"
    assert sent["key"] == f"checkout-{order.number}-1"  # a retried request cannot open a second session
    assert body["line_items[0][price_data][unit_amount]"] == ["2500"]
    assert body["line_items[0][price_data][currency]"] == ["eur"]
    assert body["metadata[order_number]"] == [order.number]
    assert body["payment_intent_data[metadata][order_number]"] == [order.number]
    assert body["success_url"] == body["cancel_url"] == ["https://shop.example.com/orders/X/"]


def test_a_signed_completion_pays_the_order_and_a_staff_refund_goes_to_stripe_once(
    client, make_variant, stripe_api, staff_user
):
    mug = make_variant(sku="MUG", stock=5, price="12.50")

    order, payment = paid_through_stripe(client, quantity=2, payment_intent="pi_1")
    assert order.status == "paid"

    order_refund(order=Order.objects.get(pk=order.pk), restock=False, actor=staff_user)
    order_refund(order=Order.objects.get(pk=order.pk), restock=False, actor=staff_user)
    charge = {"object": "charge", "id": "ch_1", "payment_intent": "pi_1", "refunded": True}
    assert stripe_webhook(client, "charge.refunded", charge) == 200  # Stripe confirms it: nothing changes

    refunds = [r for r in stripe_api.requests if r["path"] == "/v1/refunds"]
    refund = Refund.objects.get()
    assert [(r["body"]["payment_intent"], r["body"]["amount"], r["key"]) for r in refunds] == [
        (["pi_1"], ["2500"], f"refund-{payment.reference}-{refund.pk}")
    ]
    assert Order.objects.get(pk=order.pk).status == "refunded" and Payment.objects.get().state == "refunded"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)  # sold, not restocked
    assert_books_balance(mug)


def test_a_refund_of_some_units_asks_stripe_for_their_amount_and_its_webhook_records_a_part(
    client, make_variant, stripe_api, staff_user
):
    make_variant(sku="MUG", stock=5, price="12.50")
    order, payment = paid_through_stripe(client, quantity=2, payment_intent="pi_3")

    order_refund(order=order, quantities={"MUG": 1}, restock=True, actor=staff_user)
    charge = {"object": "charge", "id": "ch_3", "payment_intent": "pi_3", "refunded": False, "currency": "eur"}
    charge |= {"amount": 2500, "amount_refunded": 1250}
    assert stripe_webhook(client, "charge.refunded", charge) == 200

    [request] = [r for r in stripe_api.requests if r["path"] == "/v1/refunds"]
    assert request["body"]["amount"] == ["1250"] and request["body"]["payment_intent"] == ["pi_3"]
    order.refresh_from_db()
    assert order.status == "paid" and order.amount_refunded == Decimal("12.50")
    assert Payment.objects.get().amount_refunded == Decimal("12.50") and Refund.objects.count() == 1


def test_a_refund_made_in_stripes_dashboard_refunds_the_order(client, make_variant, stripe_api):
    make_variant(sku="MUG", stock=5)
    order, _ = paid_through_stripe(client, quantity=1, payment_intent="pi_2")

    refunded = {"object": "charge", "id": "ch_2", "payment_intent": "pi_2", "refunded": True, "currency": "eur"}
    refunded |= {"amount": 999, "amount_refunded": 999}
    assert stripe_webhook(client, "charge.refunded", refunded) == 200

    assert Order.objects.get(pk=order.pk).status == "refunded" and Payment.objects.get().state == "refunded"


@pytest.mark.parametrize(
    "unreadable",
    [{"currency": None}, {"amount_refunded": None}, {"amount_refunded": "1250"}, {"amount_refunded": -1}],
    ids=["no currency", "no amount", "amount as text", "negative amount"],
)
def test_a_partial_refund_stripe_does_not_say_in_full_is_kept_for_staff_not_taken_as_nothing(
    client, make_variant, stripe_api, unreadable, caplog
):
    make_variant(sku="MUG", stock=5, price="12.50")
    order, _ = paid_through_stripe(client, quantity=2, payment_intent="pi_4")
    charge = {"object": "charge", "id": "ch_4", "payment_intent": "pi_4", "refunded": False, "currency": "eur"}
    charge = {
        key: value
        for key, value in (charge | {"amount": 2500, "amount_refunded": 1250} | unreadable).items()
        if value is not None
    }

    assert stripe_webhook(client, "charge.refunded", charge) == 200  # stored, answered: Stripe does not resend

    [event] = PaymentEvent.objects.filter(type="charge.refunded")
    assert event.processed_at is None and any("kept unprocessed" in r.getMessage() for r in caplog.records)
    assert Payment.objects.get().amount_refunded == 0 and Order.objects.get(pk=order.pk).amount_refunded == 0


@pytest.mark.parametrize(
    ("currency", "price", "sent"),
    [("JPY", "1500", "3000"), ("KWD", "1.25", "2500"), ("EUR", "12.50", "2500"), ("USD", "0.10", "20")],
)
def test_amounts_go_to_stripe_in_the_minor_unit_stripe_defines_for_the_currency(
    make_variant, stripe_api, settings, currency, price, sent
):
    settings.SHOP_CURRENCY = currency
    make_variant(sku="MUG", stock=5, price=price)
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    order_pay(order=order, return_url="https://shop.example.com/")

    [request] = stripe_api.requests
    assert request["body"]["line_items[0][price_data][unit_amount]"] == [sent]
    assert request["body"]["line_items[0][price_data][currency]"] == [currency.lower()]


@pytest.mark.parametrize(
    ("currency", "price", "shipping", "sent"),
    [("JPY", "1080", "500", "3740"), ("EUR", "10.80", "5.00", "3740")],  # 3 x price + shipping
)
def test_stripe_is_asked_for_the_stored_total_with_shipping_in_the_currencys_minor_unit(
    make_variant, shipping_rules, stripe_api, settings, currency, price, shipping, sent
):
    settings.SHOP_CURRENCY = currency
    zone = shipping_rules["standard"].zone
    post = ShippingMethod.objects.create(zone=zone, name="Post", price=Decimal(shipping))
    make_variant(sku="TEA", stock=5, price=price, requires_shipping=True)
    order = order_place(
        email="ann@example.com", items=[{"sku": "TEA", "quantity": 3}], idempotency_key="k",
        shipping_address=ADDRESS_DE, shipping_method=post.pk,
    )  # fmt: skip

    payment = order_pay(order=order, return_url="https://shop.example.com/")

    [request] = stripe_api.requests
    assert request["body"]["line_items[0][price_data][unit_amount]"] == [sent]  # yen as yen, euros as cents
    assert payment.amount == order.total and order.tax > 0  # the stored total, VAT inside it


def test_an_amount_the_currency_cannot_express_is_refused_before_stripe_is_asked(make_variant, stripe_api, settings):
    settings.SHOP_CURRENCY = "JPY"
    make_variant(sku="MUG", stock=5, price="9.99")  # a yen has no cents
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")

    with pytest.raises(DomainError) as refused:
        order_pay(order=order, return_url="https://shop.example.com/")

    assert refused.value.code == "amount_not_chargeable"
    assert stripe_api.requests == [] and not Payment.objects.exists()


def test_a_checkout_session_expires_with_the_orders_payable_window_and_on_cancel(
    make_variant, stripe_api, celery_eager, django_capture_on_commit_callbacks
):
    make_variant(sku="MUG", stock=5)
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")

    payment = order_pay(order=order, return_url="https://shop.example.com/")
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=order)

    payable_until = order.expires_at + timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS)
    create, expire = stripe_api.requests
    assert create["body"]["expires_at"] == [str(int(payable_until.timestamp()))]
    assert expire["path"] == f"/v1/checkout/sessions/{payment.reference}/expire"
    assert expire["key"] == f"expire-{payment.reference}"


@pytest.mark.parametrize("differs", [{"amount_total": 100}, {"currency": "usd"}, {"amount_total": None}])
def test_a_success_for_another_amount_or_currency_is_refused_and_left_for_staff(
    client, make_variant, stripe_api, differs
):
    mug = make_variant(sku="MUG", stock=5, price="12.50")
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    payment = order_pay(order=order, return_url="https://shop.example.com/")
    session = {"object": "checkout.session", "id": payment.reference, "payment_status": "paid"}
    session |= {"payment_intent": "pi_1", "amount_total": 2500, "currency": "eur"} | differs

    assert stripe_webhook(client, "checkout.session.completed", session) == 200

    assert Order.objects.get(pk=order.pk).status == "awaiting_payment"
    assert Payment.objects.get().state == "review"
    assert [r["path"] for r in stripe_api.requests] == ["/v1/checkout/sessions"]  # nothing refunded
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 2)
