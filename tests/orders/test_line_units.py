"""The unit rule of an order line, on every path that moves units (services, API, admin, order page): a
unit is shipped at most once, returned only if shipped and neither returned nor refunded, refunded at most
once; units shipped and units refunded before shipping never exceed those ordered; a restock puts back only
a unit that came back (returned) or never left (refunded before shipping)."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fulfilment.errors import ReturnNotAllowed, ShipmentExceedsOrder
from fulfilment.models import ReturnRequest
from fulfilment.services import Tracking, order_ship, return_request_accept, return_request_create
from inventory.models import StockMovement
from inventory.services import stock_restock
from orders.models import Order, OrderLine
from orders.services import order_place
from payments.drift import order_line_list_units_broken
from payments.errors import RefundExceedsOrder, RefundFailed
from payments.services import order_refund
from tests.conftest import assert_books_balance, client_for, messages_of, pay, stock_of

pytestmark = pytest.mark.django_db

DHL = Tracking(carrier="DHL", number="0034")


def units(order) -> dict[str, tuple[int, int, int]]:
    """Per SKU: (shipped, refunded, returned)."""
    return {
        sku: (shipped, refunded, returned)
        for sku, shipped, refunded, returned in OrderLine.objects.filter(order=order).values_list(
            "variant__sku", "quantity_shipped", "quantity_refunded", "quantity_returned"
        )
    }


def restocked(order) -> int:
    return sum(
        StockMovement.objects.filter(order=order, reason="refund_restock").values_list("on_hand_delta", flat=True)
    )


@pytest.fixture
def sneakers(make_variant, provider, customer):
    """alice's paid order of 2 sneakers (stock 10), 1 shipped and that one returned (accepted)."""
    customer.email = "alice@example.com"
    customer.save()
    sneaker = make_variant(sku="SNK", name="Sneaker", stock=10, price="50.00")
    order = pay(order_place(customer=customer, items=[{"sku": "SNK", "quantity": 2}], idempotency_key="s"))
    order_ship(order=order, tracking=DHL, quantities={"SNK": 1})
    return_request_accept(return_request=return_request_create(order=order, quantities={"SNK": 1}))
    return {"order": Order.objects.get(pk=order.pk), "sneaker": sneaker}


# "Ship everything left" counts refunds.


def test_units_refunded_before_shipping_are_not_shipped(paid):
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 3}, restock=True)

    with pytest.raises(ShipmentExceedsOrder) as refused:
        order_ship(order=order, tracking=DHL, quantities={"MUG": 1})
    assert refused.value.payload["lines"] == [{"sku": "MUG", "requested": 1, "left": 0}]
    shipment = order_ship(order=order, tracking=DHL)  # everything left: the tee

    assert [(line.order_line.variant.sku, line.quantity) for line in shipment.lines.all()] == [("TEE", 1)]
    assert units(order) == {"MUG": (0, 3, 0), "TEE": (1, 0, 0)}
    assert Order.objects.get(pk=order.pk).status == Order.Status.SHIPPED  # nothing is left to send
    assert stock_of(paid["mug"]).on_hand == 10 and restocked(order) == 3
    assert order_line_list_units_broken() == []


def test_the_api_ships_what_is_left_after_refunds(paid, shop_staff):
    order = paid["order"]
    staff = client_for(shop_staff)
    order_refund(order=order, quantities={"MUG": 2}, restock=True)

    named = staff.post(
        f"/api/orders/{order.number}/ship/", {"carrier": "DHL", "lines": [{"sku": "MUG", "quantity": 2}]}, format="json"
    )
    rest = staff.post(f"/api/orders/{order.number}/ship/", {"carrier": "DHL"}, format="json")

    assert named.status_code == 409 and named.json()["code"] == "shipment_exceeds_order"
    assert named.json()["lines"] == [{"sku": "MUG", "requested": 2, "left": 1}]
    assert rest.status_code == 200, rest.json()
    assert rest.json()["shipments"][0]["lines"] == [{"sku": "MUG", "quantity": 1}, {"sku": "TEE", "quantity": 1}]
    assert rest.json()["status"] == "shipped"
    assert [(line["sku"], line["quantity_shipped"], line["quantity_returned"]) for line in rest.json()["lines"]] == [
        ("MUG", 1, 0),
        ("TEE", 1, 0),
    ]


def test_the_admin_ship_form_offers_only_units_neither_shipped_nor_refunded(paid, staff_admin):
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 3}, restock=False)
    lines = {line.variant.sku: line.pk for line in order.lines.select_related("variant")}

    form = staff_admin.get(f"/admin/orders/order/{order.pk}/ship/").content.decode()
    over = staff_admin.post(
        f"/admin/orders/order/{order.pk}/ship/",
        {"carrier": "DHL", f"line_{lines['MUG']}": "1", f"line_{lines['TEE']}": "1"},
    )

    assert f'name="line_{lines["MUG"]}" value="0"' in form and f'name="line_{lines["TEE"]}" value="1"' in form
    assert "3 refunded before shipping" in form
    assert over.status_code == 200 and units(order) == {"MUG": (0, 3, 0), "TEE": (0, 0, 0)}


# Never-shipped units are not "returned".


def test_a_unit_never_shipped_cannot_be_returned_on_the_page_or_the_api(sneakers, customer, client):
    order = sneakers["order"]
    client.force_login(customer)

    page = client.get(f"/orders/{order.number}/").content.decode()
    asked = client_for(customer).post(
        f"/api/orders/{order.number}/returns/", {"lines": [{"sku": "SNK", "quantity": 1}]}, format="json"
    )

    assert 'data-testid="return-form"' not in page and "up to 1" not in page
    assert asked.status_code == 409 and asked.json()["code"] == "return_not_allowed"
    assert asked.json()["lines"] == [{"sku": "SNK", "requested": 1, "left": 0}]
    with pytest.raises(ReturnNotAllowed):
        return_request_create(order=order, quantities={"SNK": 1})


def test_the_unit_never_shipped_is_still_shipped_once_and_the_stock_is_true(sneakers):
    order = sneakers["order"]

    order_ship(order=order, tracking=DHL)  # the second sneaker, paid and never sent
    with pytest.raises(Exception) as again:
        order_ship(order=order, tracking=DHL)

    assert again.value.code == "order_not_shippable"
    assert units(order) == {"SNK": (2, 1, 1)}
    assert stock_of(sneakers["sneaker"]).on_hand == 9  # 10, 2 sold, 1 came back
    assert order_line_list_units_broken() == []
    assert_books_balance(sneakers["sneaker"])


# A restock puts back only what is on the shelf.


def test_refunding_units_at_the_customer_with_restock_puts_back_only_those_never_shipped(paid):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"MUG": 2})

    order_refund(order=order, quantities={"MUG": 3}, restock=True)

    assert units(order)["MUG"] == (2, 3, 0) and restocked(order) == 1
    assert stock_of(paid["mug"]).on_hand == 8  # 10, 3 sold, the 1 never shipped back
    with pytest.raises(ReturnNotAllowed):
        return_request_create(order=order, quantities={"MUG": 1})  # refunded already: nothing to return
    assert order_line_list_units_broken() == []


def test_a_refund_cancels_units_not_yet_shipped_first(paid):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"MUG": 1, "TEE": 1})

    order_refund(order=order, quantities={"MUG": 1}, restock=False)

    assert restocked(order) == 0
    order_ship(order=order, tracking=DHL)  # one mug is left to send: the refund took one never shipped
    assert units(order)["MUG"] == (2, 1, 0)
    assert Order.objects.get(pk=order.pk).status == Order.Status.SHIPPED
    assert return_request_create(order=order, quantities={"MUG": 2})  # both shipped mugs can come back


def test_refund_and_restock_of_a_partly_shipped_order_puts_back_what_never_left(paid, staff_admin):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"MUG": 1, "TEE": 1})

    done = staff_admin.post(
        "/admin/orders/order/",
        {"action": "refund_and_restock", "_selected_action": [order.pk], "index": 0, "post": "yes"},
    )

    assert messages_of(done) == [f"Refunded 1 order(s); their units not shipped are back on hand: {order.number}."]
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert units(order) == {"MUG": (1, 3, 0), "TEE": (1, 1, 0)} and restocked(order) == 2
    assert (stock_of(paid["mug"]).on_hand, stock_of(paid["tee"]).on_hand) == (9, 4)
    assert order_line_list_units_broken() == []
    assert_books_balance(paid["mug"], paid["tee"])


# Shipments, refunds and returns interleaved.


def test_shipments_refunds_and_returns_interleaved_move_each_unit_once(paid, capsys):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"MUG": 1})
    asked = return_request_create(order=order, quantities={"MUG": 1})
    with pytest.raises(ReturnNotAllowed):
        return_request_create(order=order, quantities={"MUG": 1})  # the one shipped mug is asked back already

    order_refund(order=order, quantities={"MUG": 1}, restock=True)  # takes a mug never shipped: restocked
    rest = order_ship(order=order, tracking=DHL)  # one mug and the tee are left
    return_request_accept(return_request=asked)

    assert [(line.order_line.variant.sku, line.quantity) for line in rest.lines.all()] == [("MUG", 1), ("TEE", 1)]
    assert units(order) == {"MUG": (2, 2, 1), "TEE": (1, 0, 0)} and restocked(order) == 2
    assert stock_of(paid["mug"]).on_hand == 9  # 10, 3 sold; one never shipped and one returned back
    assert return_request_create(order=order, quantities={"MUG": 1})  # the second shipped mug may come back
    assert order_line_list_units_broken() == []
    call_command("reconcile", "--full")
    assert "Units: 0 order line(s) break the unit rule." in capsys.readouterr().out


def test_a_return_whose_refund_the_provider_refuses_gives_its_units_back(sneakers, provider):
    order = sneakers["order"]
    order_ship(order=order, tracking=DHL)
    asked = return_request_create(order=order, quantities={"SNK": 1})

    def refuse(payment):
        raise RuntimeError("card closed")

    provider.during_refund = refuse
    with pytest.raises(RefundFailed):
        return_request_accept(return_request=asked)

    assert units(order) == {"SNK": (2, 1, 1)}  # as before: the first return only
    assert ReturnRequest.objects.get(pk=asked.pk).state == ReturnRequest.State.REQUESTED
    return_request_accept(return_request=asked)
    assert units(order) == {"SNK": (2, 2, 2)} and stock_of(sneakers["sneaker"]).on_hand == 10
    assert order_line_list_units_broken() == []


# reconcile finds a line that breaks the rule.


def test_reconcile_reports_a_line_returned_beyond_what_was_shipped(sneakers, capsys):
    order = sneakers["order"]
    OrderLine.objects.filter(order=order).update(quantity_returned=2)  # as the old code let happen

    for full in (False, True):
        with pytest.raises(CommandError):
            call_command("reconcile", *(["--full"] if full else []))
        assert f"UNITS order {order.number} SNK: 2 returned of 1 shipped" in capsys.readouterr().out


def test_reconcile_reports_a_restock_of_units_at_the_customer(paid, capsys):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"MUG": 3})
    order_refund(order=order, quantities={"MUG": 1}, restock=False)
    line = OrderLine.objects.get(order=order, variant__sku="MUG")
    # The restock the old code made of a refunded unit the customer kept.
    stock_restock(sku="MUG", quantity=1, reason="refund_restock", actor=None, order=order, order_line=line)

    for full in (False, True):
        with pytest.raises(CommandError):
            call_command("reconcile", *(["--full"] if full else []))
        out = capsys.readouterr().out
        assert f"UNITS order {order.number} MUG: 1 restocked, but 0 came back or were refunded unshipped" in out
    [broken] = order_line_list_units_broken()
    assert broken.pk == line.pk


# The database's guards refuse on their own: a check skipped (a lost lock, a bug) meets a refusal, not a 500.


def test_the_guarded_updates_refuse_more_than_is_left_even_when_the_checks_before_them_pass(paid, monkeypatch):
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 2}, restock=False)
    monkeypatch.setattr("fulfilment.services.shipments._quantities_checked", lambda lines, quantities: quantities)
    monkeypatch.setattr("payments.services.refunds._quantities_checked", lambda lines, quantities, **_: quantities)

    with pytest.raises(ShipmentExceedsOrder):  # 1 mug is left to ship, not 3
        order_ship(order=order, tracking=DHL, quantities={"MUG": 3})
    with pytest.raises(RefundExceedsOrder):  # 1 mug is left to refund, not 3
        order_refund(order=order, quantities={"MUG": 3}, restock=False)

    assert units(order) == {"MUG": (0, 2, 0), "TEE": (0, 0, 0)}
    assert order_line_list_units_broken() == []
