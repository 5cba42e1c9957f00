"""The fields a buyer gives with an order are listed once (``Order.BUYER_FIELDS``): the checkout form, the
API's input and output, placing and the admin read them from there, so adding one is the model, its
migration and the templates. tests/orders/test_wire_versions.py runs an older holder beside a buyer
that gives a field the holder does not know.

``payment_reference``, a text column placing leaves at its default, stands in for a new buyer field."""

import hashlib
import json

import pytest
from django.db import models

from core.api import _bound_once
from core.errors import InvalidInput
from inventory.locks import wire
from orders.admin import OrderAdmin
from orders.apis import OrderCollectionApi
from orders.forms import CheckoutForm
from orders.models import Order
from orders.serializers import OrderOutputSerializer
from orders.services import order_place
from orders.services.placing_wire import PlaceRequest, order_row
from tests.inventory.test_wire import PLACE, PLACE_REQUEST

STAND_IN = "payment_reference"


@pytest.fixture
def one_more(monkeypatch):
    """The code of a release that adds a buyer field (the output's fields are bound once: unbind them)."""
    monkeypatch.setattr(Order, "BUYER_FIELDS", (*Order.BUYER_FIELDS, STAND_IN))
    _bound_once.cache_clear()
    yield Order.BUYER_FIELDS
    _bound_once.cache_clear()


@pytest.fixture(params=["as-they-are", "one-more"])
def buyer_fields(request) -> tuple[str, ...]:
    return request.getfixturevalue("one_more") if request.param == "one-more" else Order.BUYER_FIELDS


def test_each_buyer_field_is_optional_text_no_longer_than_its_column(buyer_fields):
    for name in buyer_fields:
        column = Order._meta.get_field(name)
        assert isinstance(column, models.CharField) and column.max_length, name
        assert column.blank and not column.null and column.get_default() == "", name


def test_the_checkout_form_and_the_api_take_and_show_every_buyer_field(buyer_fields):
    form = CheckoutForm().fields
    taken = OrderCollectionApi.OrderCreateInputSerializer().fields
    shown = OrderOutputSerializer().fields
    for name in buyer_fields:
        max_length = Order._meta.get_field(name).max_length
        assert (form[name].required, form[name].max_length) == (False, max_length)
        assert (taken[name].required, taken[name].max_length) == (False, max_length)
        assert name in shown


def test_the_admin_shows_every_buyer_field():
    shown = {field for _, options in OrderAdmin.fieldsets for field in options["fields"]}
    assert set(Order.BUYER_FIELDS) <= shown


def test_a_buyer_field_queues_by_name_and_a_holder_not_knowing_it_cannot_read_the_request(monkeypatch):
    body = PLACE.replace(b'"given":{}', b'"given":{"%s":"For Bo"}' % STAND_IN.encode())
    with pytest.raises(wire.Malformed, match=f"names buyer fields this code does not know: {STAND_IN}"):
        wire.decode(body, PlaceRequest)
    monkeypatch.setattr(Order, "BUYER_FIELDS", (*Order.BUYER_FIELDS, STAND_IN))
    request = wire.decode(body, PlaceRequest)
    assert request.given == {STAND_IN: "For Bo"} and wire.encode(request) == body
    assert order_row(request, number="N", expires_at=None)[STAND_IN] == "For Bo"
    assert STAND_IN not in order_row(PLACE_REQUEST, number="N", expires_at=None)  # its default, then


@pytest.mark.django_db
def test_a_buyer_field_is_placed_replayed_and_shown(one_more, customer_client, make_variant):
    make_variant(sku="MUG", stock=10, price="12.50")

    def create(key, given):
        body = {"items": [{"sku": "MUG", "quantity": 1}], **given}
        return customer_client.post("/api/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)

    placed = create("k1", {STAND_IN: " For Bo "})
    again, changed = create("k1", {STAND_IN: "For Bo"}), create("k1", {STAND_IN: "For Al"})
    too_long = create("k2", {STAND_IN: "x" * 65})
    none = create("k3", {})

    assert placed.status_code == 201 and placed.json()[STAND_IN] == "For Bo"  # stripped, as stored
    assert Order.objects.get(number=placed.json()["number"]).payment_reference == "For Bo"
    assert again.status_code == 201 and again.json()["number"] == placed.json()["number"]
    assert changed.status_code == 422 and changed.json()["code"] == "idempotency_conflict"
    assert too_long.status_code == 400 and STAND_IN in too_long.json()["fields"]
    # An order that gives none hashes as orders did before buyer fields: their keys still replay.
    assert none.status_code == 201 and none.json()[STAND_IN] == ""
    before = hashlib.sha256(json.dumps([["MUG", 1]]).encode()).hexdigest()
    assert Order.objects.get(number=none.json()["number"]).request_fingerprint == before


@pytest.mark.django_db
def test_the_checkout_page_places_what_the_buyer_typed(one_more, client, make_variant):
    make_variant(sku="MUG", stock=10, price="12.50")
    client.post("/cart/add/MUG/", {"quantity": 1})
    key = client.get("/checkout/").context["form"]["idempotency_key"].value()

    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key, STAND_IN: "For Bo"})

    assert Order.objects.get().payment_reference == "For Bo"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "field"),
    [({"voucher_code": "X"}, "voucher_code"), ({STAND_IN: 5}, STAND_IN), ({STAND_IN: "x" * 65}, STAND_IN)],
    ids=["not-a-buyer-field", "not-text", "too-long"],
)
def test_placing_refuses_a_buyer_field_it_does_not_take(one_more, make_variant, given, field):
    make_variant(sku="MUG", stock=10)
    with pytest.raises(InvalidInput) as refused:
        order_place(email="a@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k", given=given)
    assert list(refused.value.payload["fields"]) == [field]
    assert not Order.objects.exists()
