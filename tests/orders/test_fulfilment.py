"""Shipping a paid order: part now and the rest later, each shipment tracked and emailed, never more than
was ordered, also when two staff ship the same lines at once."""

from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from core.errors import DomainError, InvalidInput
from fulfilment.emails import order_email_list_send
from fulfilment.errors import OrderNotShippable, ShipmentExceedsOrder
from fulfilment.models import Shipment
from fulfilment.services import Tracking, order_ship
from orders.errors import OrderNotCancellable
from orders.links import order_link
from orders.models import PAID_STATUSES, SHIPPABLE_STATUSES, Order, OrderLine
from orders.selectors import order_units_held
from orders.services import order_cancel, order_place
from payments.services import order_refund
from tests.conftest import assert_books_balance, client_for, pay, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db

DHL = Tracking(carrier="DHL", number="00340434161094015902", url="https://www.dhl.de/track?n=00340434161094015902")


@pytest.fixture
def paid(make_variant, provider):
    """A paid order of 3 mugs and 1 tee."""
    mug, tee = make_variant(sku="MUG", name="Logo mug", stock=10), make_variant(sku="TEE", name="Black tee", stock=5)
    order = order_place(
        email="ann@example.com",
        items=[{"sku": "MUG", "quantity": 3}, {"sku": "TEE", "quantity": 1}],
        idempotency_key="k",
    )
    return {"order": pay(order), "mug": mug, "tee": tee}


def shipped(order) -> dict[str, int]:
    return dict(OrderLine.objects.filter(order=order).values_list("variant__sku", "quantity_shipped"))


def test_part_now_then_the_rest_each_emailed_with_its_tracking(paid, mailoutbox):
    order, mug, tee = paid["order"], paid["mug"], paid["tee"]
    stock_before = [(stock_of(v).on_hand, stock_of(v).reserved) for v in (mug, tee)]
    assert order_email_list_send() == 1  # the receipt
    mailoutbox.clear()

    first = order_ship(order=order, tracking=DHL, quantities={"MUG": 2})
    assert Order.objects.get(pk=order.pk).status == Order.Status.PARTIALLY_SHIPPED
    assert shipped(order) == {"MUG": 2, "TEE": 0}
    rest = order_ship(order=order, tracking=Tracking(carrier="UPS", number="1Z999AA10123456784"))

    assert Order.objects.get(pk=order.pk).status == Order.Status.SHIPPED
    assert shipped(order) == {"MUG": 3, "TEE": 1}
    assert [(line.order_line.variant.sku, line.quantity) for line in rest.lines.all()] == [("MUG", 1), ("TEE", 1)]
    # Shipping moves no stock: paying committed it.
    assert [(stock_of(v).on_hand, stock_of(v).reserved) for v in (mug, tee)] == stock_before
    assert_books_balance(mug, tee)
    call_command("reconcile")

    assert order_email_list_send() == 2 and order_email_list_send() == 0  # one per shipment, once
    first_mail, rest_mail = mailoutbox
    assert first_mail.subject == f"Order {order.number}: shipped with DHL"
    assert "2 x Logo mug (MUG)" in first_mail.body and DHL.number in first_mail.body and DHL.url in first_mail.body
    assert "The rest of your order follows" in first_mail.body
    assert "1 x Black tee (TEE)" in rest_mail.body and "1Z999AA10123456784" in rest_mail.body
    assert "The rest of your order follows" not in rest_mail.body
    assert Shipment.objects.filter(order=order, emailed_at__isnull=False).count() == 2
    assert first.shipped_by is None


@pytest.mark.parametrize(
    ("quantities", "error", "field"),
    [
        ({"MUG": 4}, ShipmentExceedsOrder, None),
        ({"CAP": 1}, InvalidInput, "CAP"),
        ({"MUG": 0}, InvalidInput, "MUG"),
        ({"MUG": -1}, InvalidInput, "MUG"),
        ({"MUG": "2"}, InvalidInput, "MUG"),
        ({}, InvalidInput, ""),
    ],
)
def test_a_bad_shipment_is_refused_and_ships_nothing(paid, quantities, error, field):
    with pytest.raises(error) as refused:
        order_ship(order=paid["order"], tracking=DHL, quantities=quantities)

    if field is not None:
        assert field in refused.value.payload["fields"]
    assert shipped(paid["order"]) == {"MUG": 0, "TEE": 0} and not Shipment.objects.exists()


def test_an_unpaid_order_or_one_shipped_in_full_is_not_shippable(paid, make_variant):
    unpaid = order_place(email="bob@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="u")
    with pytest.raises(OrderNotShippable):
        order_ship(order=unpaid, tracking=DHL)
    with pytest.raises(InvalidInput):
        order_ship(order=paid["order"], tracking=Tracking(carrier=" "))

    order_ship(order=paid["order"], tracking=DHL)
    with pytest.raises(OrderNotShippable):
        order_ship(order=paid["order"], tracking=DHL, quantities={"MUG": 1})
    assert Shipment.objects.count() == 1


def test_a_shipped_order_can_be_refunded_not_cancelled_and_its_units_still_count_for_the_limit(paid, make_variant):
    order = paid["order"]
    order_ship(order=order, tracking=DHL, quantities={"TEE": 1})

    with pytest.raises(OrderNotCancellable):
        order_cancel(order=Order.objects.get(pk=order.pk))
    held = order_units_held(buyers={order.buyer}, variant_ids={paid["mug"].pk})
    assert held[(order.buyer, paid["mug"].pk)] == 3

    refunded = order_refund(order=Order.objects.get(pk=order.pk), restock=False)
    assert refunded.status == Order.Status.REFUNDED


def _ship_all(order_id: int) -> str:
    wait_for_peers()
    try:
        order_ship(order=Order.objects.get(pk=order_id), tracking=DHL, quantities={"MUG": 3, "TEE": 1})
    except DomainError as refusal:
        return refusal.code
    return "shipped"


@pytest.mark.django_db(transaction=True)
def test_staff_shipping_the_same_lines_at_once_ship_them_once(paid):
    order = paid["order"]

    answers = run_parallel(_ship_all, [{"order_id": order.pk}] * 6, processes=6, barrier=True)

    assert sorted(answers) == ["order_not_shippable"] * 5 + ["shipped"]
    assert shipped(order) == {"MUG": 3, "TEE": 1} and Shipment.objects.count() == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.SHIPPED


def test_staff_ship_through_the_api_and_the_buyer_sees_the_tracking(paid, shop_staff, django_user_model):
    order = paid["order"]
    staff = client_for(shop_staff)

    part = staff.post(
        f"/api/orders/{order.number}/ship/",
        {
            "carrier": "DHL",
            "tracking_number": DHL.number,
            "tracking_url": DHL.url,
            "lines": [{"sku": "MUG", "quantity": 1}],
        },
        format="json",
    )
    too_many = staff.post(
        f"/api/orders/{order.number}/ship/", {"carrier": "DHL", "lines": [{"sku": "MUG", "quantity": 5}]}, format="json"
    )
    twice = staff.post(
        f"/api/orders/{order.number}/ship/",
        {"carrier": "DHL", "lines": [{"sku": "MUG", "quantity": 1}, {"sku": "MUG", "quantity": 1}]},
        format="json",
    )
    no_carrier = staff.post(f"/api/orders/{order.number}/ship/", {"lines": []}, format="json")

    assert part.status_code == 200, part.json()
    body = part.json()
    assert body["status"] == "partially_shipped"
    assert [(line["sku"], line["quantity_shipped"]) for line in body["lines"]] == [("MUG", 1), ("TEE", 0)]
    [shipment] = body["shipments"]
    assert (shipment["carrier"], shipment["tracking_number"], shipment["tracking_url"]) == ("DHL", DHL.number, DHL.url)
    assert shipment["lines"] == [{"sku": "MUG", "quantity": 1}]
    assert too_many.status_code == 409 and too_many.json()["code"] == "shipment_exceeds_order"
    assert too_many.json()["lines"] == [{"sku": "MUG", "requested": 5, "left": 2}]
    assert twice.status_code == 400 and no_carrier.status_code == 400
    assert shipped(order) == {"MUG": 1, "TEE": 0}


def test_the_order_page_shows_the_shipments_and_the_admin_ships(paid, staff_admin, client):
    order = paid["order"]
    change = staff_admin.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    assert f"/admin/orders/order/{order.pk}/ship/" in change

    form = staff_admin.get(f"/admin/orders/order/{order.pk}/ship/").content.decode()
    assert 'name="carrier"' in form and "0 of 3 shipped already" in form
    lines = {line.variant.sku: line.pk for line in order.lines.select_related("variant")}
    posted = staff_admin.post(
        f"/admin/orders/order/{order.pk}/ship/",
        {"carrier": "DHL", "tracking_number": DHL.number, "tracking_url": DHL.url,
         f"line_{lines['MUG']}": "3", f"line_{lines['TEE']}": "0"},
    )  # fmt: skip
    assert posted.status_code == 302
    assert shipped(order) == {"MUG": 3, "TEE": 0}
    over = staff_admin.post(
        f"/admin/orders/order/{order.pk}/ship/",
        {"carrier": "DHL", f"line_{lines['MUG']}": "1", f"line_{lines['TEE']}": "1"},
    )
    assert over.status_code == 200 and shipped(order) == {"MUG": 3, "TEE": 0}  # MUG has none left: a form error

    link = urlsplit(order_link(order))  # the buyer's email link: the order, read-only, in any browser
    text = client.get(f"{link.path}?{link.query}").content.decode()
    assert "Partially shipped" in text and DHL.number in text and "3 x Logo mug" in text


def test_the_admin_offers_ship_and_refund_for_the_statuses_the_services_take(paid, staff_admin):
    """The buttons read the status lists the services refuse by (``SHIPPABLE_STATUSES``, ``PAID_STATUSES``)."""
    order = paid["order"]
    offered = {}
    for status in Order.Status:
        Order.objects.filter(pk=order.pk).update(status=status)
        page = staff_admin.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
        offered[status] = ('data-testid="ship"' in page, 'data-testid="refund"' in page)
    assert offered == {status: (status in SHIPPABLE_STATUSES, status in PAID_STATUSES) for status in Order.Status}
