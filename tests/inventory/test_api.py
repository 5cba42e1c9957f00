import pytest

from inventory.models import StockMovement
from orders.services import order_place
from tests.conftest import assert_books_balance, client_for, stock_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def mug(make_variant):
    return make_variant(sku="MUG", stock=10)


def test_staff_read_the_stock(staff_client, mug):
    body = staff_client.get("/api/inventory/mug/").json()
    assert {k: body[k] for k in ("sku", "on_hand", "reserved", "available")} == {
        "sku": "MUG",
        "on_hand": 10,
        "reserved": 0,
        "available": 10,
    }
    assert body["version"] == stock_of(mug).version


def test_staff_set_on_hand_or_apply_a_delta_with_a_reason(staff_client, staff_user, mug):
    set_to = staff_client.patch("/api/inventory/MUG/", {"on_hand": 25, "reason": "count"}, format="json")
    shifted = staff_client.patch("/api/inventory/MUG/", {"delta": -5, "reason": "broken"}, format="json")

    assert set_to.status_code == 200 and set_to.json()["on_hand"] == 25
    assert shifted.json()["on_hand"] == 20
    movements = StockMovement.objects.filter(kind="adjust", actor=staff_user)
    assert list(movements.values_list("on_hand_delta", "reason")) == [(15, "count"), (-5, "broken")]
    assert_books_balance(mug)


def test_a_stale_version_is_refused_instead_of_overwriting_a_sale(staff_client, mug, customer):
    version = staff_client.get("/api/inventory/MUG/").json()["version"]
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    stale = staff_client.patch(
        "/api/inventory/MUG/", {"on_hand": 30, "reason": "count", "version": version}, format="json"
    )
    fresh_version = staff_client.get("/api/inventory/MUG/").json()["version"]
    fresh = staff_client.patch(
        "/api/inventory/MUG/", {"on_hand": 30, "reason": "count", "version": fresh_version}, format="json"
    )

    assert stale.status_code == 409 and stale.json()["code"] == "stale_version"
    assert fresh.status_code == 200 and fresh.json()["reserved"] == 2
    assert_books_balance(mug)


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"on_hand": 1, "reason": "r"}, 409, "below_reserved"),
        ({"delta": -9, "reason": "r"}, 409, "below_reserved"),
        ({"on_hand": 5, "delta": 1, "reason": "r"}, 400, "invalid_input"),
        ({"reason": "r"}, 400, "invalid_input"),
        ({"on_hand": 5}, 400, "invalid_input"),
        ({"on_hand": -1, "reason": "r"}, 400, "invalid_input"),
        ({"on_hand": "5", "reason": "r"}, 400, "invalid_input"),
        ({"delta": 0, "reason": "r"}, 400, "invalid_quantity"),
        ({"delta": 10**10, "reason": "r"}, 400, "invalid_input"),
        ({"delta": 1, "reason": ""}, 400, "invalid_input"),
    ],
)
def test_bad_stock_edits_are_refused_and_change_nothing(staff_client, mug, customer, body, status, code):
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    before = (stock_of(mug).on_hand, StockMovement.objects.count())

    response = staff_client.patch("/api/inventory/MUG/", body, format="json")

    assert (response.status_code, response.json()["code"]) == (status, code)
    assert (stock_of(mug).on_hand, StockMovement.objects.count()) == before


def test_the_ledger_is_paginated_newest_first(staff_client, mug, customer):
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    body = staff_client.get("/api/inventory/MUG/movements/?page_size=1").json()
    assert body["count"] == 2
    assert body["results"][0]["kind"] == "reserve" and body["results"][0]["order"] == order.number
    assert staff_client.get(body["next"]).json()["results"][0]["kind"] == "restock"


def test_inventory_is_for_staff_with_stock_permissions(api_client, customer_client, staff_client, staff_user, mug):
    staff_user.user_permissions.clear()  # staff, but not allowed to see or change stock
    bare_staff = client_for(staff_user)
    for client, status, code in (
        (api_client, 401, "not_authenticated"),
        (customer_client, 403, "permission_denied"),
        (bare_staff, 403, "permission_denied"),
    ):
        for response in (
            client.get("/api/inventory/MUG/"),
            client.patch("/api/inventory/MUG/", {"delta": 1, "reason": "r"}, format="json"),
            client.get("/api/inventory/MUG/movements/"),
        ):
            assert (response.status_code, response.json()["code"]) == (status, code)
    assert stock_of(mug).on_hand == 10


def test_unknown_or_deleted_skus_are_not_found(staff_client, make_variant):
    make_variant(sku="GONE").delete()
    for sku in ("NOPE", "GONE"):
        for response in (
            staff_client.get(f"/api/inventory/{sku}/"),
            staff_client.get(f"/api/inventory/{sku}/movements/"),
        ):
            assert (response.status_code, response.json()["code"]) == (404, "not_found")


def test_a_token_comes_from_username_and_password(api_client, customer):
    good = api_client.post("/api/auth/token/", {"username": "alice", "password": "pw-alice-123"}, format="json")
    bad = api_client.post("/api/auth/token/", {"username": "alice", "password": "wrong"}, format="json")
    assert good.status_code == 200 and len(good.json()["token"]) == 64  # 256 random bits, as hex
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_input"
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {good.json()['token']}")
    assert api_client.get("/api/orders/").status_code == 200


def test_session_auth_works_too(client, customer):
    client.force_login(customer)
    assert client.get("/api/orders/").status_code == 200


def test_the_schema_and_swagger_ui_are_served_without_a_cdn(client):
    schema = client.get("/api/schema/")
    docs = client.get("/api/docs/")
    assert schema.status_code == 200 and b"/api/orders/{number}/pay/" in schema.content
    assert b"/api/orders/{number}/refund/" in schema.content and b"PaymentOutput" in schema.content
    assert docs.status_code == 200 and b"cdn" not in docs.content.lower()
    asset = next(part.split('"')[1] for part in docs.content.decode().split("src=")[1:] if "swagger" in part)
    assert client.get(asset).status_code == 200
