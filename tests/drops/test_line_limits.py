"""One buyer, one place: two tabs and the API share it, and a drop's hold counts toward the variant's
``max_per_customer`` like any order."""

import pytest
from django.test import Client

from drops import passes
from drops.models import Drop
from orders.models import Order
from orders.services import drop_line_pass, order_place
from tests.conftest import client_for, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_tabs_and_the_api_get_one_place_and_one_unit(make_drop, customer):
    drop = make_drop(units=5, max_per_customer=1)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    browser = Client()
    browser.force_login(customer)
    for _tab in range(2):  # a second tab shares the first's cookies
        browser.post(f"/drops/{drop.pk}/", {"sku": variant.sku, "quantity": "1"})
    other_browser = Client()
    other_browser.force_login(customer)  # another device, the same account
    other_browser.post(f"/drops/{drop.pk}/", {"sku": variant.sku, "quantity": "1"})
    api = client_for(customer)
    joined = api.post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json")
    assert joined.status_code == 200  # not 201: the account's place exists
    tickets = {
        passes.pass_ticket(c.cookies[passes.cookie_name(drop.pk)].value, drop_id=drop.pk)
        for c in (browser, other_browser)
    }
    assert tickets == {joined.json()["ticket"]} == {1}
    while drop_line_pass(drop=drop).admitted:
        pass
    items = {"items": [{"sku": variant.sku, "quantity": 1}]}
    assert api.post("/api/orders/", items, format="json", HTTP_IDEMPOTENCY_KEY="again").json()["code"] == "not_admitted"
    assert Order.objects.count() == 1 and stock_of(variant).reserved == 1


def test_a_buyer_at_their_limit_is_refused_a_hold_and_the_next_is_admitted(make_drop, customer, django_user_model):
    drop = make_drop(units=5, max_per_customer=1)
    variant = drop.entries.get().variant
    Drop.objects.filter(pk=drop.pk).update(line_on=False)  # bought before the line was turned on
    order_place(customer=customer, items=[{"sku": variant.sku, "quantity": 1}], idempotency_key="before")
    Drop.objects.filter(pk=drop.pk).update(line_on=True)
    drop_line_pass(drop=drop)
    bob = django_user_model.objects.create_user("bob2", "bob2@example.com")
    for buyer in (customer, bob):
        client_for(buyer).post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json")
    result = drop_line_pass(drop=drop)
    assert (result.admitted, result.refused) == (1, 1)
    place = client_for(customer).post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json").json()
    assert (place["state"], place["code"]) == ("refused", "limit_exceeded")
    assert Order.objects.filter(customer=bob, status=Order.Status.HELD).count() == 1
