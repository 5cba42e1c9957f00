"""Pin the round trips of the hot path: a count, not a timing, so a regression shows up in review."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.redis_wire import redis_round_trips
from core.clock import db_now
from inventory.services import stock_reserve
from orders.models import Order
from orders.services import order_place
from orders.services.voucher_facts import order_voucher_statements
from shop.models import ProductVariant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_commands():
    """Redis round trips: a command, or the commands sent together in one write joined by '+'."""
    with redis_round_trips() as sent:
        yield sent


@pytest.mark.parametrize("skus", [1, 3])
def test_placing_an_order_costs_a_fixed_number_of_queries_and_redis_commands(make_variant, redis_commands, skus):
    for n in range(skus):
        make_variant(sku=f"SKU-{n}", stock=10)
    items = [{"sku": f"SKU-{n}", "quantity": 1} for n in range(skus)]
    db_now()  # the database's clock is read once per DB_CLOCK_RESYNC_SECONDS, not per order
    order_place(email="a@example.com", items=items, idempotency_key="warm")  # the lock scripts loaded in Redis
    redis_commands.clear()

    with CaptureQueriesContext(connection) as queries:
        order_place(email="a@example.com", items=items, idempotency_key="k")

    # BEGIN; the replay check, the products, which of them a drop's line alone sells and the tax rates in one
    # round trip; in one round trip a savepoint, the
    # order, the guarded UPDATE per SKU (nothing read before: the stock covers it) and the units they
    # left; in one round trip the lines, their reservations and ledger rows (INSERT ... SELECTs from the
    # new lines); COMMIT. The same for one SKU or several, and for a batch of queued one-SKU orders.
    assert len(queries) == 5, [q["sql"][:60] for q in queries]
    assert queries[1]["sql"].count("; ") == 3
    assert queries[2]["sql"].count("; ") == 2 + skus
    assert queries[3]["sql"].count("; ") == 2
    if skus == 1:
        # The acquire script (which also refuses a SKU marked sold out and takes the orders queued behind
        # it; its reply skipped) with the wait for the lock, and the release script (with the queued
        # orders' answers).
        assert redis_commands == ["CLIENT+EVALSHA+BLPOP", "EVALSHA"]
    else:
        # One script takes every free lock (after reading their sold-out marks), one releases them all.
        assert redis_commands == ["EVALSHA", "EVALSHA"]


def test_an_order_with_a_voucher_costs_the_same_round_trips_its_voucher_row_locked(make_variant, make_voucher):
    make_variant(sku="SKU-0", stock=10)
    make_voucher(code="DROP20", usage_limit=100, limit_per_customer=1)
    order_place(email="a@example.com", items=[{"sku": "SKU-0", "quantity": 1}], idempotency_key="warm")

    with CaptureQueriesContext(connection) as queries:
        order = order_place(
            email="b@example.com", items=[{"sku": "SKU-0", "quantity": 1}], idempotency_key="k", voucher="drop20"
        )

    # As above; the first round trip also reads what the voucher's check needs (``order_voucher_statements``:
    # the voucher, its row FOR UPDATE so its uses stay as counted until the commit, the products and
    # categories it is for, the buyers' uses, the variants' products); the last also inserts the use and
    # adds it to the voucher's counter.
    assert order.voucher_code == "DROP20" and order.discount > 0
    assert len(queries) == 5, [q["sql"][:60] for q in queries]
    reads = order_voucher_statements(codes=["DROP20"], skus=["SKU-0"], buyers=["email:b@example.com"])
    assert queries[1]["sql"].count("; ") == 3 + len(reads) and "FOR UPDATE" in queries[1]["sql"]
    assert queries[3]["sql"].count("; ") == 2 + 2


def test_reserving_an_order_with_its_lines_at_hand_costs_three_queries_and_two_redis_round_trips(
    make_variant, redis_commands
):
    make_variant(sku="SKU-0", stock=10)
    order = order_place(email="a@example.com", items=[{"sku": "SKU-0", "quantity": 1}], idempotency_key="k")
    order = Order.objects.prefetch_related("lines__variant").get(pk=order.pk)
    redis_commands.clear()

    with CaptureQueriesContext(connection) as queries:
        reservations = stock_reserve(order=order, expires_at=order.expires_at)

    # BEGIN; in one round trip a savepoint, the reservations, their ledger rows, the guarded UPDATE
    # (no read before: the stock covers it) and the units it left (a sell-out is marked); COMMIT.
    assert len(queries) == 3, [q["sql"][:60] for q in queries]
    assert queries[1]["sql"].count("; ") == 4
    # Acquire (or be refused on a sold-out mark, and take the queued) and release.
    assert redis_commands == ["CLIENT+EVALSHA+BLPOP", "EVALSHA"]
    assert [r.quantity for r in reservations] == [1] and reservations[0].pk is not None


@pytest.mark.parametrize("skus", [1, 3])
def test_the_order_api_answers_a_new_order_without_reading_it_back(make_variant, customer_client, skus):
    """The placed order comes back from the service with its lines, prices and product names at hand."""
    for n in range(skus):
        make_variant(sku=f"SKU-{n}", stock=10, price=f"{n + 1}.50")
    items = [{"sku": f"SKU-{n}", "quantity": n + 1} for n in range(skus)]
    customer_client.post("/api/orders/", {"items": items}, format="json", HTTP_IDEMPOTENCY_KEY="warm")

    with CaptureQueriesContext(connection) as queries:
        response = customer_client.post("/api/orders/", {"items": items}, format="json", HTTP_IDEMPOTENCY_KEY="k")

    assert response.status_code == 201
    assert queries[-1]["sql"] == "COMMIT", [q["sql"][:60] for q in queries]  # nothing read after placing
    assert response.json()["lines"] == [
        {
            "sku": f"SKU-{n}",
            "name": ProductVariant.objects.get(sku=f"SKU-{n}").name,
            "quantity": n + 1,
            "quantity_shipped": 0,
            "quantity_refunded": 0,
            "quantity_returned": 0,
            "unit_price": f"{n + 1}.50",
            "line_total": f"{(n + 1) * (n + 1.5):.2f}",
            "tax_rate": "0.000",
            "tax": "0.00",
            "discount": "0.00",
        }
        for n in range(skus)
    ]
    assert response.json() == customer_client.get(f"/api/orders/{response.json()['number']}/").json()
