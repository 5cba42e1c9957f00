"""Returns: the buyer asks from the order page or the API for shipped units; staff accept (refunded and
restocked) or refuse; each step is emailed through a real SMTP server; never a unit that was not shipped."""

from decimal import Decimal

import pytest
from django.core.management import call_command

from core.errors import DomainError, InvalidInput
from fulfilment.emails import order_email_list_send
from fulfilment.errors import ReturnAlreadyDecided, ReturnNotAllowed
from fulfilment.models import ReturnRequest
from fulfilment.services import (
    Tracking,
    order_ship,
    return_request_accept,
    return_request_create,
    return_request_refuse,
)
from inventory.models import StockMovement
from orders.models import Order
from orders.services import order_place
from payments.models import Refund
from payments.services import order_refund
from tests.conftest import assert_books_balance, client_for, pay, stock_of
from tests.race import run_parallel, wait_for_peers
from tests.smtp import text_of

pytestmark = pytest.mark.django_db

DHL = Tracking(carrier="DHL", number="0034", url="https://www.dhl.de/track?n=0034")


@pytest.fixture
def shipped(make_variant, provider, customer):
    """alice's paid order of 3 mugs at 2.50 and 1 tee at 20.00, of which 2 mugs and the tee shipped."""
    customer.email = "alice@example.com"
    customer.save()
    mug = make_variant(sku="MUG", name="Logo mug", stock=10, price="2.50")
    tee = make_variant(sku="TEE", name="Black tee", stock=5, price="20.00")
    order = order_place(
        customer=customer, items=[{"sku": "MUG", "quantity": 3}, {"sku": "TEE", "quantity": 1}], idempotency_key="k"
    )
    order = pay(order)
    order_ship(order=order, tracking=DHL, quantities={"MUG": 2, "TEE": 1})
    return {"order": Order.objects.get(pk=order.pk), "mug": mug, "tee": tee}


def test_the_buyer_asks_on_the_order_page_staff_accept_and_each_step_is_emailed(
    shipped, customer, client, shop_staff, inbox
):
    order, mug = shipped["order"], shipped["mug"]
    order_email_list_send()
    subjects = {message["Subject"]: message for message in inbox.take()}
    shipped_email = subjects[f"Order {order.number}: shipped with DHL"]  # the shipment, by real SMTP too
    assert DHL.url in text_of(shipped_email) and "2 x Logo mug (MUG)" in text_of(shipped_email)
    client.force_login(customer)
    page = client.get(f"/orders/{order.number}/").content.decode()
    assert 'data-testid="return-form"' in page and "Logo mug (up to 2)" in page and "Black tee (up to 1)" in page
    lines = {line.variant.sku: line.pk for line in order.lines.select_related("variant")}

    asked = client.post(
        f"/orders/{order.number}/return/",
        {f"units_{lines['MUG']}": "1", f"units_{lines['TEE']}": "0", "reason": "Too small"},
        follow=True,
    )

    assert "Return requested" in asked.content.decode()
    [requested] = ReturnRequest.objects.all()
    assert (requested.state, requested.reason) == (ReturnRequest.State.REQUESTED, "Too small")
    assert order_email_list_send() == 1
    [email] = inbox.take()
    assert email["Subject"] == f"Order {order.number}: we have your return request"
    assert "1 x Logo mug (MUG)" in text_of(email)

    accepted = client_for(shop_staff).post(f"/api/returns/{requested.pk}/accept/", {"answer": "Thanks"}, format="json")

    assert accepted.status_code == 200, accepted.json()
    assert accepted.json()["state"] == "accepted" and accepted.json()["refunded"] == "2.50"
    assert stock_of(mug).on_hand == 8 and StockMovement.objects.filter(reason="refund_restock").count() == 1
    assert Refund.objects.get().source == Refund.Source.RETURN
    assert order_email_list_send() == 1 and order_email_list_send() == 0  # the return's email, not a second
    [email] = inbox.take()
    assert email["Subject"].strip() == f"Order {order.number}: return accepted, €2.50 refunded"  # folded: long
    assert "Thanks" in text_of(email)
    page = client.get(f"/orders/{order.number}/").content.decode()
    assert 'data-testid="returns"' in page and "Accepted: refunded" in page and "€2.50 refunded" in page
    assert_books_balance(mug)
    call_command("reconcile")


def test_no_return_of_units_not_shipped_nor_asked_back_twice(shipped, make_variant, customer):
    order = shipped["order"]

    with pytest.raises(ReturnNotAllowed) as refused:
        return_request_create(order=order, quantities={"MUG": 3})  # the third mug was not shipped
    assert refused.value.payload["lines"] == [{"sku": "MUG", "requested": 3, "left": 2}]
    return_request_create(order=order, quantities={"MUG": 2})
    with pytest.raises(ReturnNotAllowed):
        return_request_create(order=order, quantities={"MUG": 1})  # both shipped mugs are asked back already
    for bad in ({}, {"NOPE": 1}, {"MUG": 0}, {"TEE": True}):
        with pytest.raises(InvalidInput):
            return_request_create(order=order, quantities=bad)

    unshipped = pay(order_place(customer=customer, items=[{"sku": "TEE", "quantity": 1}], idempotency_key="k2"))
    with pytest.raises(ReturnNotAllowed):
        return_request_create(order=unshipped, quantities={"TEE": 1})
    assert ReturnRequest.objects.count() == 1


def test_refused_returns_are_emailed_with_the_answer_and_decided_once(shipped, staff_user, inbox):
    order = shipped["order"]
    asked = return_request_create(order=order, quantities={"TEE": 1}, reason="Changed my mind")

    return_request_refuse(return_request=asked, actor=staff_user, answer="Worn items cannot be returned.")
    with pytest.raises(ReturnAlreadyDecided):
        return_request_accept(return_request=asked, actor=staff_user)

    assert Order.objects.get(pk=order.pk).amount_refunded == 0 and not Refund.objects.exists()
    order_email_list_send()
    refusal = [email for email in inbox.take() if "return" in email["Subject"]]
    assert [email["Subject"] for email in refusal] == [f"Order {order.number}: return not accepted"]
    assert "Worn items cannot be returned." in text_of(refusal[0])
    assert return_request_create(order=order, quantities={"TEE": 1})  # refused: the unit may be asked again


def test_accepting_a_return_whose_units_were_refunded_meanwhile_is_refused_and_it_stays_requested(shipped):
    order = shipped["order"]
    asked = return_request_create(order=order, quantities={"TEE": 1})
    order_refund(order=order, quantities={"TEE": 1}, restock=False)

    with pytest.raises(DomainError) as refused:
        return_request_accept(return_request=asked)

    assert refused.value.code == "refund_exceeds_order"
    assert ReturnRequest.objects.get().state == ReturnRequest.State.REQUESTED
    assert Order.objects.get(pk=order.pk).amount_refunded == Decimal("20.00")


def test_returns_through_the_api_for_the_buyer_and_staff(shipped, customer, bob, shop_staff):
    order = shipped["order"]
    url = f"/api/orders/{order.number}/returns/"
    buyer = client_for(customer)

    created = buyer.post(url, {"lines": [{"sku": "MUG", "quantity": 1}], "reason": "Chipped"}, format="json")
    not_theirs = client_for(bob).post(url, {"lines": [{"sku": "MUG", "quantity": 1}]}, format="json")
    too_many = buyer.post(url, {"lines": [{"sku": "MUG", "quantity": 2}]}, format="json")
    bad = [
        buyer.post(url, {"lines": []}, format="json"),
        buyer.post(url, {"lines": [{"sku": "MUG", "quantity": "1"}]}, format="json"),
        buyer.post(url, {"lines": [{"sku": "MUG", "quantity": 1}], "reason": 5}, format="json"),
        buyer.post(url, b"[", content_type="application/json"),
    ]

    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["state"], body["reason"], body["refunded"]) == ("requested", "Chipped", None)
    assert body["lines"] == [{"sku": "MUG", "quantity": 1}]
    assert not_theirs.status_code == 404
    assert too_many.status_code == 409 and too_many.json()["code"] == "return_not_allowed"
    assert [response.status_code for response in bad] == [400] * 4
    staff = client_for(shop_staff)
    assert buyer.post(f"/api/returns/{body['id']}/accept/", {}, format="json").status_code == 403
    refused = staff.post(f"/api/returns/{body['id']}/refuse/", {"answer": "No"}, format="json")
    again = staff.post(f"/api/returns/{body['id']}/accept/", {}, format="json")
    assert refused.status_code == 200 and refused.json()["state"] == "refused"
    assert again.status_code == 409 and again.json()["code"] == "return_already_decided"
    assert staff.post("/api/returns/999999/accept/", {}, format="json").status_code == 404
    order_view = buyer.get(f"/api/orders/{order.number}/").json()
    assert [(r["state"], r["answer"]) for r in order_view["returns"]] == [("refused", "No")]


def _accept(return_id: int) -> str:
    wait_for_peers()
    try:
        return_request_accept(return_request=ReturnRequest.objects.get(pk=return_id))
    except DomainError as refusal:
        return refusal.code
    return "accepted"


@pytest.mark.django_db(transaction=True)
def test_staff_accepting_the_same_return_at_once_refund_it_once(shipped):
    asked = return_request_create(order=shipped["order"], quantities={"MUG": 2, "TEE": 1})

    answers = run_parallel(_accept, [{"return_id": asked.pk}] * 4, processes=4, barrier=True)

    assert sorted(answers) == ["accepted"] + ["return_already_decided"] * 3
    assert Refund.objects.count() == 1 and Order.objects.get(pk=asked.order_id).amount_refunded == Decimal("25.00")
    assert StockMovement.objects.filter(reason="refund_restock").count() == 2
    assert (stock_of(shipped["mug"]).on_hand, stock_of(shipped["tee"]).on_hand) == (9, 5)
