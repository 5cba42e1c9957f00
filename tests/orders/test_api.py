from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from fulfilment.services import Tracking, order_ship
from inventory.models import StockMovement
from orders.models import Order
from orders.services import order_release_failed_payments
from payments.models import Payment
from payments.providers.local import local_event
from tests.conftest import ADDRESS_DE, assert_books_balance, client_for, pay, stock_of, webhook_deliver
from tests.race import holding

pytestmark = pytest.mark.django_db


@pytest.fixture
def mug(make_variant):
    return make_variant(sku="MUG", stock=10, price="12.50")


def create(client, items, key="key-1", data_extra=None, **extra):
    body = {"items": items} | (data_extra or {})
    return client.post("/api/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key, **extra)


def test_placing_an_order_reserves_stock_and_returns_it(customer_client, mug):
    response = create(customer_client, [{"sku": "MUG", "quantity": 2}])

    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "awaiting_payment" and body["total"] == "25.00"
    assert body["lines"] == [
        {
            "sku": "MUG",
            "name": mug.name,
            "quantity": 2,
            "quantity_shipped": 0,
            "quantity_refunded": 0,
            "quantity_returned": 0,
            "unit_price": "12.50",
            "line_total": "25.00",
            "tax_rate": "0.000",
            "tax": "0.00",
            "discount": "0.00",
        }
    ]
    assert body["voucher_code"] == "" and body["discount"] == "0.00"
    assert body["expires_at"] and len(body["number"]) == 10
    assert stock_of(mug).reserved == 2


def test_a_replay_returns_the_same_order_and_a_changed_body_is_a_conflict(customer_client, mug):
    first = create(customer_client, [{"sku": "MUG", "quantity": 2}]).json()
    again = create(customer_client, [{"sku": "MUG", "quantity": 2}])
    changed = create(customer_client, [{"sku": "MUG", "quantity": 3}])

    assert again.status_code == 201 and again.json()["number"] == first["number"]
    assert changed.status_code == 422 and changed.json()["code"] == "idempotency_conflict"
    assert stock_of(mug).reserved == 2 and Order.objects.count() == 1


def test_not_enough_stock_is_409_with_what_is_left_per_sku(customer_client, mug, make_variant):
    make_variant(sku="TEE", stock=1)
    response = create(customer_client, [{"sku": "MUG", "quantity": 11}, {"sku": "TEE", "quantity": 1}])

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "insufficient_stock" and body["fields"] == {}
    assert body["shortages"] == [{"sku": "MUG", "requested": 11, "available": 10}]
    assert stock_of(mug).reserved == 0


@pytest.mark.parametrize(
    "items, code",
    [
        ([{"sku": "MUG", "quantity": 0}], "invalid_input"),
        ([{"sku": "MUG", "quantity": -2}], "invalid_input"),
        ([{"sku": "MUG", "quantity": 10**9}], "invalid_input"),
        ([{"sku": "MUG", "quantity": "2"}], "invalid_input"),
        ([{"sku": "MUG", "quantity": 1.5}], "invalid_input"),
        ([{"sku": "MUG", "quantity": True}], "invalid_input"),
        ([{"sku": "MUG"}], "invalid_input"),
        ([], "invalid_input"),
        ("MUG", "invalid_input"),
        ([{"sku": "NOPE", "quantity": 1}], "unknown_sku"),
        ([{"sku": "OLD", "quantity": 1}], "product_unavailable"),
        ([{"sku": "GONE", "quantity": 1}], "product_unavailable"),
        ([{"sku": "MUG", "quantity": 1}, {"sku": "mug", "quantity": 1}], "duplicate_line"),
    ],
)
def test_bad_orders_are_400_with_a_code_and_change_nothing(customer_client, mug, make_variant, items, code):
    make_variant(sku="OLD", stock=5, is_active=False)
    make_variant(sku="GONE", stock=5).delete()
    movements = StockMovement.objects.count()

    response = create(customer_client, items)

    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code
    assert set(response.json()) >= {"code", "detail", "fields"}
    assert StockMovement.objects.count() == movements and not Order.objects.exists()


def test_malformed_json_a_missing_key_and_a_non_object_body(customer_client, mug):
    malformed = customer_client.post(
        "/api/orders/", data='{"items": [', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    missing_key = customer_client.post("/api/orders/", {"items": [{"sku": "MUG", "quantity": 1}]}, format="json")
    not_object = customer_client.post("/api/orders/", [1, 2], format="json", HTTP_IDEMPOTENCY_KEY="k")
    too_long_key = create(customer_client, [{"sku": "MUG", "quantity": 1}], key="k" * 65)

    assert (malformed.status_code, malformed.json()["code"]) == (400, "malformed_json")
    assert (missing_key.status_code, missing_key.json()["code"]) == (400, "idempotency_key_required")
    assert (not_object.status_code, not_object.json()["code"]) == (400, "invalid_input")
    assert too_long_key.json()["code"] == "idempotency_key_required"
    assert not Order.objects.exists()


def test_orders_need_authentication(api_client, mug):
    for response in (api_client.get("/api/orders/"), create(api_client, [{"sku": "MUG", "quantity": 1}])):
        assert response.status_code == 401 and response.json()["code"] == "not_authenticated"


def test_customers_only_see_pay_and_cancel_their_own_orders(customer_client, mug, django_user_model):
    number = create(customer_client, [{"sku": "MUG", "quantity": 1}]).json()["number"]
    bob = client_for(django_user_model.objects.create_user(username="bob", password="pw-bob-123"))

    assert bob.get("/api/orders/").json()["count"] == 0
    for response in (
        bob.get(f"/api/orders/{number}/"),
        bob.post(f"/api/orders/{number}/pay/"),
        bob.post(f"/api/orders/{number}/cancel/"),
    ):
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert Order.objects.get().status == "awaiting_payment"
    listing = customer_client.get("/api/orders/").json()
    assert listing["count"] == 1 and listing["results"][0]["number"] == number
    assert customer_client.get(f"/api/orders/{number}/").json()["number"] == number


def test_pay_starts_a_payment_its_webhook_completes_and_a_second_call_returns_the_same(customer_client, mug):
    number = create(customer_client, [{"sku": "MUG", "quantity": 3}]).json()["number"]

    started = customer_client.post(f"/api/orders/{number}/pay/")
    again = customer_client.post(f"/api/orders/{number}/pay/")

    assert started.status_code == again.status_code == 200
    payment = started.json()
    assert payment["state"] == "pending" and payment["amount"] == "37.50" and payment["order"] == number
    assert payment["redirect_url"] == f"/payments/local/{payment['reference']}/"
    assert again.json() == payment  # the same checkout, never a second charge
    assert customer_client.get(f"/api/orders/{number}/").json()["status"] == "awaiting_payment"

    webhook_deliver(local_event("checkout.session.completed", payment=Payment.objects.get()))

    order = customer_client.get(f"/api/orders/{number}/").json()
    assert order["status"] == "paid" and order["paid_at"]
    assert customer_client.post(f"/api/orders/{number}/pay/").json()["state"] == "captured"
    cancel = customer_client.post(f"/api/orders/{number}/cancel/")
    assert cancel.status_code == 409 and cancel.json()["code"] == "order_not_cancellable"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (7, 0)
    assert_books_balance(mug)


def test_a_declined_payment_is_tried_again_with_a_new_payment_and_its_units_reserved_again(customer_client, mug):
    number = create(customer_client, [{"sku": "MUG", "quantity": 3}]).json()["number"]
    customer_client.post(f"/api/orders/{number}/pay/")

    webhook_deliver(local_event("checkout.session.async_payment_failed", payment=Payment.objects.get()))
    assert customer_client.get(f"/api/orders/{number}/").json()["status"] == "payment_failed"

    retried = customer_client.post(f"/api/orders/{number}/pay/")
    assert retried.status_code == 200 and retried.json()["state"] == "pending"
    assert customer_client.get(f"/api/orders/{number}/").json()["status"] == "awaiting_payment"
    assert stock_of(mug).reserved == 3
    webhook_deliver(local_event("checkout.session.completed", payment=Payment.objects.get(attempt=2)))
    assert customer_client.get(f"/api/orders/{number}/").json()["status"] == "paid"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (7, 0)
    assert_books_balance(mug)


def test_a_declined_payment_whose_units_are_gone_meanwhile_is_not_tried_again(customer_client, mug):
    number = create(customer_client, [{"sku": "MUG", "quantity": 3}]).json()["number"]
    customer_client.post(f"/api/orders/{number}/pay/")
    webhook_deliver(local_event("checkout.session.async_payment_failed", payment=Payment.objects.get()))
    order_release_failed_payments(batch_size=10)
    other = create(customer_client, [{"sku": "MUG", "quantity": 9}], key="another")  # 10 on hand: 1 left
    assert other.status_code == 201, other.json()

    retried = customer_client.post(f"/api/orders/{number}/pay/")

    assert retried.status_code == 409 and retried.json()["code"] == "order_expired"
    assert customer_client.get(f"/api/orders/{number}/").json()["status"] == "payment_failed"
    assert stock_of(mug).reserved == 9 and Payment.objects.count() == 1


@pytest.fixture
def refunder(django_user_model):
    user = django_user_model.objects.create_user(username="rita", password="pw-rita-123", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="refund_order"))
    return client_for(user)


@pytest.mark.parametrize("restock", [True, False])
def test_staff_refund_a_paid_order_once_restocking_its_units_if_asked(customer_client, refunder, mug, restock):
    number = create(customer_client, [{"sku": "MUG", "quantity": 3}]).json()["number"]
    pay(Order.objects.get(number=number))

    refunded = refunder.post(f"/api/orders/{number}/refund/", {"restock": restock}, format="json")
    again = refunder.post(f"/api/orders/{number}/refund/", {"restock": restock}, format="json")

    assert refunded.status_code == again.status_code == 200
    assert refunded.json()["status"] == again.json()["status"] == "refunded"
    assert Payment.objects.get().state == "refunded"
    restocked = StockMovement.objects.filter(reason="refund_restock")
    assert [(m.kind, m.on_hand_delta) for m in restocked] == ([("restock", 3)] if restock else [])
    assert stock_of(mug).on_hand == (10 if restock else 7)
    assert_books_balance(mug)


def test_only_staff_with_the_refund_permission_refund_and_only_paid_orders(customer_client, refunder, staff_user, mug):
    staff_client = client_for(staff_user)  # staff, without refund_order
    number = create(customer_client, [{"sku": "MUG", "quantity": 1}]).json()["number"]

    unpaid = refunder.post(f"/api/orders/{number}/refund/", {"restock": True}, format="json")
    assert unpaid.status_code == 409 and unpaid.json()["code"] == "order_not_refundable"
    pay(Order.objects.get(number=number))
    for caller in (customer_client, staff_client):
        response = caller.post(f"/api/orders/{number}/refund/", {"restock": True}, format="json")
        assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    for body in ({}, {"restock": "perhaps"}, {"restock": [1]}):
        response = refunder.post(f"/api/orders/{number}/refund/", body, format="json")
        assert response.status_code == 400 and response.json()["fields"]["restock"]
    assert refunder.post("/api/orders/NOSUCH/refund/", {"restock": True}, format="json").status_code == 404
    assert Order.objects.get().status == "paid"


def test_paying_an_expired_order_whose_stock_is_gone(customer_client, mug, django_user_model):
    number = create(customer_client, [{"sku": "MUG", "quantity": 6}]).json()["number"]
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    bob = client_for(django_user_model.objects.create_user(username="bob", password="pw-bob-123"))
    assert create(bob, [{"sku": "MUG", "quantity": 8}], key="bob").status_code == 201  # expires ours first

    response = customer_client.post(f"/api/orders/{number}/pay/")

    assert response.status_code == 409 and response.json()["code"] == "order_expired"
    assert response.json()["shortages"] == [{"sku": "MUG", "requested": 6, "available": 2}]


def test_cancel_gives_the_stock_back_once(customer_client, mug):
    number = create(customer_client, [{"sku": "MUG", "quantity": 4}]).json()["number"]
    first = customer_client.post(f"/api/orders/{number}/cancel/")
    second = customer_client.post(f"/api/orders/{number}/cancel/")
    paying = customer_client.post(f"/api/orders/{number}/pay/")
    assert first.json()["status"] == second.json()["status"] == "cancelled"
    assert paying.status_code == 409 and paying.json()["code"] == "order_not_payable"
    assert stock_of(mug).reserved == 0 and StockMovement.objects.filter(kind="release").count() == 1


def test_a_busy_sku_answers_503_with_retry_after(customer_client, mug, settings):
    settings.LOCK_WAIT_SECONDS = 0.2
    with holding(["MUG"]):  # another buyer's transaction holds the SKU
        response = create(customer_client, [{"sku": "MUG", "quantity": 1}])
    assert response.status_code == 503 and response.json()["code"] == "lock_timeout"
    assert response["Retry-After"] == "1"
    assert not Order.objects.exists()


def test_the_order_output_bound_once_renders_what_drf_renders_from_the_declared_fields(
    customer_client, mug, make_variant, shipping_rules
):
    """``OrderOutputSerializer`` binds its fields once for speed (``core.api.FieldsBoundOnce``); what it
    renders must stay what DRF renders with the fields it copies for each serializer, field for field."""
    from rest_framework import serializers

    from orders.serializers import OrderOutputSerializer

    make_variant(sku="TEE", stock=5, price="7.05")
    number = create(customer_client, [{"sku": "MUG", "quantity": 3}, {"sku": "TEE", "quantity": 1}]).json()["number"]
    unpaid = Order.objects.get(number=number)
    paid = pay(Order.objects.get(number=number))
    make_variant(sku="LAMP", stock=5, price="30.00", requires_shipping=True)
    shipped = create(
        customer_client,
        [{"sku": "LAMP", "quantity": 1}],
        key="shipped",
        data_extra={"shipping_address": ADDRESS_DE, "shipping_method": shipping_rules["standard"].pk},
    ).json()["number"]
    billed = create(
        customer_client,
        [{"sku": "LAMP", "quantity": 1}],
        key="billed",
        data_extra={
            "shipping_address": ADDRESS_DE,
            "billing_address": ADDRESS_DE | {"full_name": "Firma GmbH"},
            "shipping_method": shipping_rules["express"].pk,
        },
    ).json()["number"]

    order_ship(order=paid, tracking=Tracking(carrier="DHL", number="0034", url="https://dhl.example/0034"),
               quantities={"MUG": 2})  # fmt: skip
    paid = Order.objects.get(pk=paid.pk)
    for order in (unpaid, paid, Order.objects.get(number=shipped), Order.objects.get(number=billed)):
        serializer = OrderOutputSerializer(order)
        assert serializer.to_representation(order) == serializers.Serializer.to_representation(serializer, order)
    assert OrderOutputSerializer(paid).data["paid_at"] is not None
    assert OrderOutputSerializer(paid).data["shipments"][0]["lines"] == [{"sku": "MUG", "quantity": 2}]
