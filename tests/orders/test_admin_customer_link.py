"""The order page's customer, for the staff `seed_demo` makes: a link they may follow, to that buyer's orders."""

import re

import pytest

from orders.services import order_place

pytestmark = pytest.mark.django_db


def test_staff_follow_the_customer_of_an_order_to_that_customers_orders(staff_admin, customer, bob, make_variant):
    make_variant(sku="MUG", stock=10, price="12.50")
    mine = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="a-1")
    theirs = order_place(customer=bob, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="b-1")

    page = staff_admin.get(f"/admin/orders/order/{mine.pk}/change/").content.decode()
    field = re.search(r'<div class="[^"]*field-customer\w*[^"]*">(.*?)</div>\s*</div>', page, re.S).group(1)
    links = re.findall(r'href="([^"]+)"', field)

    assert customer.username in field and customer.email in field
    assert links, field
    for link in links:
        followed = staff_admin.get(link.replace("&amp;", "&"))
        assert followed.status_code == 200, link
        assert mine.number in followed.content.decode() and theirs.number not in followed.content.decode()


def test_a_guest_order_says_guest_beside_its_email(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10, price="12.50")
    guest = order_place(email="gus@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="g-1")

    page = staff_admin.get(f"/admin/orders/order/{guest.pk}/change/").content.decode()

    assert re.search(r'field-customer_shown">.*?guest', page, re.S) and "gus@example.com" in page
