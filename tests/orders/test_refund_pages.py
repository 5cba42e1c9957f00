"""Refunds by line where staff and buyers meet them: the API, the admin's Refund page, the order page."""

from decimal import Decimal
from urllib.parse import urlsplit

import pytest

from fulfilment.services import Tracking, order_ship
from inventory.models import StockMovement
from orders.links import order_link
from orders.models import Order
from tests.conftest import client_for, stock_of
from tests.orders.conftest import refunded_units

pytestmark = pytest.mark.django_db


def test_staff_refund_lines_through_the_api_and_the_answer_shows_the_refund(paid, shop_staff):
    order = paid["order"]
    staff = client_for(shop_staff)
    url = f"/api/orders/{order.number}/refund/"

    part = staff.post(url, {"restock": True, "lines": [{"sku": "MUG", "quantity": 2}]}, format="json")
    too_many = staff.post(url, {"restock": True, "lines": [{"sku": "MUG", "quantity": 2}]}, format="json")
    twice = staff.post(
        url, {"restock": True, "lines": [{"sku": "TEE", "quantity": 1}, {"sku": "TEE", "quantity": 1}]}, format="json"
    )
    bad = [
        staff.post(url, {"restock": True, "lines": [{"sku": "MUG", "quantity": 0}]}, format="json"),
        staff.post(url, {"restock": True, "lines": [{"sku": "MUG", "quantity": "1"}]}, format="json"),
        staff.post(url, {"restock": True, "lines": [{"sku": "NOPE", "quantity": 1}]}, format="json"),
        staff.post(url, {"restock": "maybe"}, format="json"),
        staff.post(url, b"{not json", content_type="application/json"),
    ]

    assert part.status_code == 200, part.json()
    body = part.json()
    assert body["status"] == "paid" and body["amount_refunded"] == "5.00"
    assert [(line["sku"], line["quantity_refunded"]) for line in body["lines"]] == [("MUG", 2), ("TEE", 0)]
    [refund] = body["refunds"]
    assert (refund["amount"], refund["shipping"], refund["state"]) == ("5.00", "0.00", "succeeded")
    assert refund["lines"] == [{"sku": "MUG", "quantity": 2, "restocked": 2}]
    assert too_many.status_code == 409 and too_many.json()["code"] == "refund_exceeds_order"
    assert too_many.json()["lines"] == [{"sku": "MUG", "requested": 2, "left": 1}]
    assert twice.status_code == 400 and [response.status_code for response in bad] == [400] * 5
    assert refunded_units(order) == {"MUG": 2, "TEE": 0} and stock_of(paid["mug"]).on_hand == 9

    rest = staff.post(url, {"restock": False}, format="json")  # no lines: all that is left

    assert rest.status_code == 200 and rest.json()["status"] == "refunded"
    assert rest.json()["amount_refunded"] == rest.json()["total"] == "27.50"
    assert [refund["amount"] for refund in rest.json()["refunds"]] == ["5.00", "22.50"]


def test_a_buyer_or_staff_without_the_permission_cannot_refund(paid, customer, staff_user):
    order = paid["order"]
    body = {"restock": False, "lines": [{"sku": "MUG", "quantity": 1}]}

    as_staff = client_for(staff_user).post(f"/api/orders/{order.number}/refund/", body, format="json")
    as_buyer = client_for(customer).post(f"/api/orders/{order.number}/refund/", body, format="json")

    assert (as_staff.status_code, as_buyer.status_code) == (403, 403)
    assert Order.objects.get(pk=order.pk).amount_refunded == 0


def test_staff_refund_units_in_the_admin_and_the_buyer_sees_them_on_the_order_page(paid, staff_admin, client):
    order = paid["order"]
    change = staff_admin.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    assert f"/admin/orders/order/{order.pk}/refund/" in change

    form = staff_admin.get(f"/admin/orders/order/{order.pk}/refund/").content.decode()
    assert 'name="restock"' in form and "0 of 3 refunded already" in form
    lines = {line.variant.sku: line.pk for line in order.lines.select_related("variant")}
    posted = staff_admin.post(
        f"/admin/orders/order/{order.pk}/refund/",
        {f"line_{lines['MUG']}": "1", f"line_{lines['TEE']}": "1", "restock": "on"},
    )
    assert posted.status_code == 302
    assert refunded_units(order) == {"MUG": 1, "TEE": 1} and stock_of(paid["tee"]).on_hand == 5
    assert StockMovement.objects.filter(reason="refund_restock", order=order).count() == 2
    over = staff_admin.post(f"/admin/orders/order/{order.pk}/refund/", {f"line_{lines['TEE']}": "1"})
    assert over.status_code == 200 and refunded_units(order) == {"MUG": 1, "TEE": 1}  # none left: a form error
    nothing = staff_admin.post(f"/admin/orders/order/{order.pk}/refund/", {})
    assert nothing.status_code == 200 and Order.objects.get(pk=order.pk).amount_refunded == Decimal("22.50")

    link = urlsplit(order_link(order))  # the buyer's email link: the order, read-only, in any browser
    text = client.get(f"{link.path}?{link.query}").content.decode()
    assert 'data-testid="refunds"' in text and "€22.50 of €27.50 refunded" in text
    assert "1 x Logo mug" in text and "1 x Black tee" in text


def test_staff_without_the_refund_permission_get_no_refund_page(paid, client, staff_user):
    client.force_login(staff_user)
    assert client.get(f"/admin/orders/order/{paid['order'].pk}/refund/").status_code == 403


def test_a_refund_with_restock_puts_back_only_units_never_shipped_on_the_api_and_the_admin(
    paid, shop_staff, staff_admin
):
    order = paid["order"]
    order_ship(order=order, tracking=Tracking(carrier="DHL"), quantities={"MUG": 2, "TEE": 1})
    url = f"/api/orders/{order.number}/refund/"

    api = client_for(shop_staff).post(url, {"restock": True, "lines": [{"sku": "MUG", "quantity": 2}]}, format="json")

    assert api.status_code == 200, api.json()
    assert api.json()["refunds"][0]["lines"] == [{"sku": "MUG", "quantity": 2, "restocked": 1}]  # 1 at the customer
    assert stock_of(paid["mug"]).on_hand == 8  # 10, 3 sold, the one never shipped back
    lines = {line.variant.sku: line.pk for line in order.lines.select_related("variant")}
    form = staff_admin.get(f"/admin/orders/order/{order.pk}/refund/").content.decode()
    assert "units at the customer come back with a return" in form and "2 shipped, 0 returned" in form
    staff_admin.post(
        f"/admin/orders/order/{order.pk}/refund/",
        {f"line_{lines['MUG']}": "0", f"line_{lines['TEE']}": "1", "restock": "on"},
    )
    assert stock_of(paid["tee"]).on_hand == 4  # the tee is at the customer: refunded, not restocked
    assert refunded_units(order) == {"MUG": 2, "TEE": 1}
    page = staff_admin.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    assert "<p>2 x MUG (1 restocked)</p>" in page and "<p>1 x TEE</p>" in page
