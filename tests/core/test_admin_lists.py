"""Admin change lists over tables that grow with history never count the whole table: their count stops at
LIST_COUNT_LIMIT (a LIMIT-ed subquery), with or without a filter, and the rows still page."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orders.services import order_place

pytestmark = pytest.mark.django_db

LISTS = [
    "/admin/orders/order/",
    "/admin/orders/order/?status__exact=awaiting_payment",
    "/admin/inventory/stockmovement/",
    "/admin/inventory/reservation/",
    "/admin/payments/paymentevent/",
]


def counts_of(sql: list[str]) -> list[str]:
    return [statement for statement in sql if re.search(r"\bCOUNT\(", statement)]


@pytest.mark.parametrize("url", LISTS)
def test_a_growing_list_counts_no_further_than_the_limit(url, admin_client, make_variant, settings):
    settings.LIST_COUNT_LIMIT = 3
    make_variant(sku="MUG", stock=20)
    for n in range(5):
        order_place(email=f"b{n}@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key=f"k{n}")

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url)

    assert response.status_code == 200
    counts = counts_of([query["sql"] for query in queries])
    assert counts, "the list counted nothing"
    for statement in counts:
        assert re.search(r"LIMIT 3\b", statement), statement  # every count is of a bounded subquery
    assert response.context["cl"].result_count <= 3
