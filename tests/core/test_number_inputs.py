"""Every numeric input of the pages, the admin's forms and the API, probed with what is not a number it
takes: superscripts, other scripts' digits, exponents, signs, 5,000 digits, padding, decimals. Each is
refused (4xx, or the page's own refusal), never a 500, and nothing changes."""

import json
import re
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.admin.options import InlineModelAdmin
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import models
from django.test import Client
from django.urls import resolve

from core.numbers import NumberInvalid, number_decimal, number_whole
from fulfilment.models import ReturnRequest, Shipment
from fulfilment.services import Tracking, order_ship
from inventory.models import Stock
from orders.models import Order
from orders.services import order_place
from payments.models import Refund
from shipping.models import AddressBookEntry
from shop.models import ProductVariant
from tests.conftest import ADDRESS_DE, client_for, pay

pytestmark = pytest.mark.django_db

LONG = "9" * 5000
PROBES = ["²", "٣", "1e3", "-1", "0", LONG, "１", " 3 ", "3.0"]
AMOUNTS = {"0", "3.0"}  # amounts a price input takes, as text and as JSON numbers
JSON_NUMBERS = {"1e3", "-1", "0", LONG, "3.0"}  # also sent as JSON numbers, not only as strings


@pytest.fixture
def shop(make_variant, provider, customer, shop_staff, shipping_rules):
    """A cart of 2 mugs and a lamp; a paid order of 2 lamps, both shipped; the customer's address book."""
    mug = make_variant(sku="MUG", name="Logo mug", stock=10, price="2.50")
    make_variant(sku="LAMP", name="Desk lamp", stock=10, price="30.00", requires_shipping=True, weight_grams=900)
    order = order_place(
        customer=customer,
        email="alice@example.com",
        items=[{"sku": "LAMP", "quantity": 2}],
        idempotency_key="probe",
        shipping_address=ADDRESS_DE,
        shipping_method=shipping_rules["standard"].pk,
    )
    pay(order)
    order_ship(order=order, tracking=Tracking(carrier="DHL"), quantities={"LAMP": 1})
    web = Client(raise_request_exception=False)
    web.force_login(customer)
    for sku, quantity in (("MUG", 2), ("LAMP", 1)):
        assert web.post(f"/cart/add/{sku}/", {"quantity": quantity}).status_code == 302
    AddressBookEntry.objects.create(user=customer, address=ADDRESS_DE, is_default_shipping=True)
    admin = Client(raise_request_exception=False)
    admin.force_login(shop_staff)
    api = client_for(customer)
    api.raise_request_exception = False
    staff_api = client_for(shop_staff)
    staff_api.raise_request_exception = False
    return {"order": Order.objects.get(pk=order.pk), "mug": mug, "web": web, "admin": admin, "api": api,
            "staff_api": staff_api}  # fmt: skip


def state(shop) -> tuple:
    """What a probe must leave as it was."""
    return (
        shop["web"].session.get("cart"),
        Order.all_objects.count(),
        list(ReturnRequest.objects.values_list("pk", flat=True)),
        Refund.objects.count(),
        Shipment.objects.count(),
        sorted(Stock.objects.values_list("variant__sku", "on_hand", "reserved", "version")),
        sorted(ProductVariant.objects.values_list("sku", "max_per_customer", "sale_price")),
        AddressBookEntry.objects.count(),
    )


def page_probes(shop, value: str):
    """(what, response) for each numeric input of the shop's pages and the admin's forms."""
    web, admin, order = shop["web"], shop["admin"], shop["order"]
    line = order.lines.get()
    stock = Stock.objects.get(variant__sku="MUG")
    mug = shop["mug"]
    yield "cart add", web.post("/cart/add/MUG/", {"quantity": value})
    if value != "0":  # 0 empties the line: a number the cart takes
        yield "cart update", web.post("/cart/update/MUG/", {"quantity": value})
    page = web.get("/checkout/").content.decode()
    key = re.search(r'name="idempotency_key" value="([^"]+)"', page)[1]
    address = {f"shipping-{field}": text for field, text in ADDRESS_DE.items()} | {"billing_same": "on"}
    for action in ("update", "place"):
        fields = address | {"shipping_method": value, "idempotency_key": key, "action": action}
        yield f"checkout {action}", web.post("/checkout/", fields | {"email": "alice@example.com"})
    if value != "0":  # no units: nothing asked, the page says so
        yield "return form", web.post(f"/orders/{order.number}/return/", {f"units_{line.pk}": value, "reason": "x"})
    for name in ("price_min", "price_max", "value", "page"):
        if not (name.startswith("price") and value in AMOUNTS):
            yield f"catalog {name}", web.get("/", {name: value})
    yield "order list page", web.get("/orders/", {"page": value})
    yield "checkout address", web.get("/checkout/", {"address": value})
    yield "address URL", web.get(f"/accounts/addresses/{quote(value)}/")
    version = str(stock.version)
    if value != "0":  # none on hand, and version 0 (stale): numbers the stock forms take
        for on_hand, loaded in ((value, version), ("5", value)):
            fields = {"new_on_hand": on_hand, "loaded_version": loaded, "reason": "x"}
            yield "stock adjust", admin.post(f"/admin/inventory/stock/{stock.pk}/change/", fields)
            row = {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-stock_id": str(stock.pk)}
            fields = row | {"form-0-new_on_hand": on_hand, "form-0-loaded_version": loaded}
            yield "product stock list", admin.post(f"/admin/shop/product/{mug.product_id}/stock/", fields)
    fields = {"carrier": "DHL", f"line_{line.pk}": value}
    yield "ship form", admin.post(f"/admin/orders/order/{order.pk}/ship/", fields)
    yield "refund form", admin.post(f"/admin/orders/order/{order.pk}/refund/", {f"line_{line.pk}": value})


def send(method, url: str, body: str, **headers):
    return method(url, body, content_type="application/json", **headers)


def api_probes(shop, value: str):
    """(what, response) for each numeric input of the API: as a JSON string, and as a JSON number where it is one."""
    api, staff_api, order = shop["api"], shop["staff_api"], shop["order"]
    sent = [json.dumps(value)] + ([value] if value in JSON_NUMBERS else [])
    for literal in sent:
        line = f'{{"sku": "MUG", "quantity": {literal}}}'
        shipping = f'"shipping_address": {json.dumps(ADDRESS_DE)}'
        bodies = {
            "order quantity": f'{{"items": [{line}]}}',
            "order method": f'{{"items": [{{"sku": "LAMP", "quantity": 1}}], {shipping}, '
            f'"shipping_method": {literal}}}',
        }
        for what, body in bodies.items():
            yield what, send(api.post, "/api/orders/", body, HTTP_IDEMPOTENCY_KEY="p")
            yield f"quote {what}", send(api.post, "/api/checkout/quote/", body)
        lamp = f'{{"lines": [{{"sku": "LAMP", "quantity": {literal}}}]}}'
        yield "return quantity", send(api.post, f"/api/orders/{order.number}/returns/", lamp)
        ship = f'{{"carrier": "DHL", "lines": [{{"sku": "LAMP", "quantity": {literal}}}]}}'
        yield "ship quantity", send(staff_api.post, f"/api/orders/{order.number}/ship/", ship)
        refund = f'{{"restock": false, "lines": [{{"sku": "LAMP", "quantity": {literal}}}]}}'
        yield "refund quantity", send(staff_api.post, f"/api/orders/{order.number}/refund/", refund)
        taken = {"0", "-1"} if literal == value else set()  # JSON numbers these fields take
        amounts = AMOUNTS | ({"1e3"} if literal == value else set())  # a JSON number 1e3 is 1000
        for field, takes in (("max_per_customer", set()), ("sale_price", amounts)):
            if value not in takes:
                body = f'{{"{field}": {literal}}}'
                yield field, send(staff_api.patch, "/api/products/MUG/", body)
        for field, extra, takes in (("on_hand", ', "reason": "x"', {"0"}), ("delta", ', "reason": "x"', {"0", "-1"}),
                                    ("version", ', "delta": 1, "reason": "x"', {"0"})):  # fmt: skip
            if value not in takes & taken:
                body = f'{{"{field}": {literal}{extra}}}'
                yield field, send(staff_api.patch, "/api/inventory/MUG/", body)
    for name in ("product", "price_min", "price_max"):
        if not (name.startswith("price") and value in AMOUNTS):
            yield f"products {name}", api.get("/api/products/", {name: value})
    for name in ("page", "page_size"):
        yield f"orders {name}", api.get("/api/orders/", {name: value})
    yield "movements page", staff_api.get("/api/inventory/MUG/movements/", {"page": value})
    yield "address URL", api.get(f"/api/accounts/addresses/{quote(value)}/")
    yield "return URL", staff_api.post(f"/api/returns/{quote(value)}/accept/", {}, format="json")


@pytest.mark.parametrize("value", PROBES, ids=["superscript", "arabic", "exponent", "minus", "zero", "5000-digits",
                                               "fullwidth", "padded", "decimal"])  # fmt: skip
def test_numeric_inputs_refuse_what_is_not_a_number_they_take(shop, value):
    before = state(shop)
    failures = []
    for what, response in page_probes(shop, value):
        if response.status_code >= 500:
            failures.append((what, response.status_code))
    for what, response in api_probes(shop, value):
        code = response.json().get("code") if response["Content-Type"].startswith("application/json") else None
        ok = response.status_code == 404 or (
            response.status_code == 400 and code in ("invalid_input", "invalid_quantity", "malformed_json")
        )
        if not ok:
            failures.append((what, response.status_code, code))
    assert not failures, "\n".join(map(str, failures))
    assert state(shop) == before


@pytest.mark.parametrize("value", PROBES + ["", "+3", "3 ", "0x1f", "NaN", "Infinity", True, None, 3.0])
def test_one_reader_takes_ascii_digits_only(value):
    with pytest.raises(NumberInvalid):
        number_whole(value, low=1, high=1000)
    if value not in ("0", "3.0"):
        with pytest.raises(NumberInvalid):
            number_decimal(value, places=2, low=0, high=1000)


def test_the_reader_takes_the_numbers_it_should():
    assert number_whole("7", low=1, high=1000) == number_whole(7, low=1, high=1000) == 7
    assert number_whole("1000", low=1, high=1000) == 1000 and number_whole("0007", low=1, high=1000) == 7
    assert str(number_decimal("12.5", places=2, low=0, high=1000)) == "12.5"
    assert str(number_decimal("0", places=2, low=0, high=1000)) == "0"


def admin_number_fields(request):
    """(name, form field) of every number an admin form or inline takes, as the admin builds them."""
    for model_admin in admin.site._registry.values():
        for owner in [model_admin, *model_admin.get_inline_instances(request)]:
            if not owner.has_change_permission(request):
                continue  # read-only: it shows numbers, takes none
            form = owner.get_formset(request).form if isinstance(owner, InlineModelAdmin) else owner.get_form(request)
            for name, field in form.base_fields.items():
                model_field = next((f for f in owner.model._meta.concrete_fields if f.name == name), None)
                if isinstance(model_field, (models.IntegerField, models.DecimalField)):
                    yield f"{owner.model.__name__}.{name}", field


def test_every_admin_form_reads_numbers_the_same_way(rf, shop_staff):
    request = rf.get("/admin/shop/product/1/change/")
    request.user, request.resolver_match = shop_staff, resolve(request.path)
    fields = dict(admin_number_fields(request))
    assert {"ProductVariant.price", "ProductVariant.max_per_customer", "Voucher.value", "ShippingMethod.price"} <= set(
        fields
    )
    taken = []
    for name, field in fields.items():
        for value in [probe for probe in PROBES if probe not in AMOUNTS]:
            try:
                field.clean(value)
            except ValidationError:
                continue
            taken.append((name, value))
    assert taken == []


@pytest.mark.parametrize("value", PROBES)
def test_commands_read_their_numbers_the_same_way(value):
    with pytest.raises(CommandError, match="Give a whole number from 1 to 10000"):
        call_command("release_expired", "--batch", value)
