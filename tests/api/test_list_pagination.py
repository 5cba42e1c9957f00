"""API lists never count every row they could show: the count is of a LIMIT-ed subquery, one row past
LIST_COUNT_LIMIT. Past the limit ``count`` is the limit, ``count_exact`` is false and the pages stop there;
below it the answer is DRF's page, exact."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orders.services import order_place
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

# Each list, who reads it, and how many rows it has in ``history``.
LISTS = {
    "a customer's orders": ("/api/orders/", "customer", 5),
    "a stock's ledger": ("/api/inventory/MUG/movements/", "staff", 6),  # received once, reserved 5 times
    "the catalog": ("/api/products/", "anyone", 5),
}


@pytest.fixture
def history(make_variant, customer):
    """Five products, and five orders of the customer's for a mug."""
    make_variant(sku="MUG", stock=20)
    for n in range(4):
        make_variant(sku=f"CUP{n}", stock=1)
    for n in range(5):
        order_place(
            customer=customer, email="alice@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key=f"k{n}"
        )


@pytest.fixture
def reader(customer, shop_staff, api_client):
    return {"customer": client_for(customer), "staff": client_for(shop_staff), "anyone": api_client}.get


def counts_of(queries) -> list[str]:
    return [query["sql"] for query in queries if re.search(r"\bCOUNT\(", query["sql"])]


@pytest.mark.parametrize("name", LISTS)
def test_a_list_past_the_limit_counts_no_further_and_pages_that_far(name, history, reader, settings):
    settings.LIST_COUNT_LIMIT = 3
    path, who, _ = LISTS[name]
    client = reader(who)

    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, {"page_size": 2})

    assert response.status_code == 200
    counts = counts_of(queries)
    assert counts, "the list counted nothing"
    for statement in counts:
        assert re.search(r"LIMIT 4\) subquery$", statement), statement  # one row past the limit, no further
    page = response.json()
    assert list(page) == ["count", "count_exact", "next", "previous", "results"]
    assert page["count"] == 3 and page["count_exact"] is False
    assert len(page["results"]) == 2 and page["previous"] is None
    last = client.get(page["next"]).json()
    assert len(last["results"]) == 1 and last["next"] is None and last["previous"]
    assert last["count"] == 3 and last["count_exact"] is False
    assert client.get(path, {"page_size": 2, "page": 3}).status_code == 404


@pytest.mark.parametrize("name", LISTS)
def test_a_list_within_the_limit_is_counted_exactly(name, history, reader):
    path, who, rows = LISTS[name]

    with CaptureQueriesContext(connection) as queries:
        page = reader(who).get(path).json()

    assert page["count"] == rows and page["count_exact"] is True and len(page["results"]) == rows
    assert page["next"] is None and page["previous"] is None
    assert all(re.search(r"LIMIT \d+\) subquery$", statement) for statement in counts_of(queries))


def test_an_empty_list_is_one_empty_page(customer):
    page = client_for(customer).get("/api/orders/").json()

    assert page == {"count": 0, "count_exact": True, "next": None, "previous": None, "results": []}


def test_the_schema_says_the_count_is_bounded(api_client, settings):
    settings.LIST_COUNT_LIMIT = 3
    schema = api_client.get("/api/schema/", {"format": "json"}).json()

    for operation in [("/api/orders/", "get"), ("/api/inventory/{sku}/movements/", "get"), ("/api/products/", "get")]:
        ok = schema["paths"][operation[0]][operation[1]]["responses"]["200"]["content"]["application/json"]["schema"]
        page = schema["components"]["schemas"][ok["$ref"].rsplit("/", 1)[-1]]
        assert list(page["properties"])[:2] == ["count", "count_exact"]
        assert page["properties"]["count_exact"]["type"] == "boolean"
        assert {"count", "count_exact", "results"} <= set(page["required"])
        assert "3" in page["properties"]["count"]["description"]
