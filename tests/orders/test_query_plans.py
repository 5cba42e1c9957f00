"""Query plans pinned: the hot and periodic queries over the tables that grow with history use an index.

The tables hold tens of thousands of rows (orders in every status, most of them history, with a line and a
ledger row each), analysed, so MariaDB's optimiser chooses as it would in a shop that has run for a while;
a full scan of a growing table (``type: ALL``, or the primary key read in order behind a filter no index
serves) fails the test, and the lists read newest first must read an index in that order (no filesort).
The API's statements are the ones a request sends, captured. Reconcile's ledger sums are not here yet: they
read the whole ledger by design until it checks from a checkpoint.
"""

import re
from datetime import timedelta
from functools import partial

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from bench.shipping import UNPRICED_ORDER
from inventory.models import Stock, StockMovement
from orders.models import Order, OrderEmail, OrderLine, PaymentEvent, new_order_number
from orders.selectors import (
    order_find_by_number,
    order_find_for_customer,
    order_list_for_customer,
    order_list_overdue,
    order_list_overdue_holding,
)
from shop.models import Product, ProductVariant

GROWING = {
    "orders_order",
    "orders_orderline",
    "orders_paymentevent",
    "orders_orderemail",
    "inventory_reservation",
    "inventory_stockmovement",
}
ORDERS = 30_000
PRODUCTS = 10


@pytest.fixture(scope="module")
def history(django_db_setup, django_db_blocker):
    """ORDERS orders over 300 customers, a twentieth of them unpaid and overdue, with an event, an email,
    a line of one of PRODUCTS products and a row in its ledger each; analysed. Module-wide: built once,
    removed after. ``historystaff`` reads the ledger."""
    with django_db_blocker.unblock():
        users = get_user_model().objects.bulk_create(
            get_user_model()(username=f"history{n}", email=f"history{n}@example.com") for n in range(300)
        )
        get_user_model().objects.create(username="historystaff", is_staff=True, is_superuser=True)
        variants = [
            ProductVariant.objects.create(
                product=Product.objects.create(name=f"History {n}"), sku=f"HISTORY-{n}", name=f"History {n}", price=0
            )
            for n in range(PRODUCTS)
        ]
        stocks = [Stock.objects.create(variant=variant) for variant in variants]
        now, statuses = timezone.now(), ["paid", "expired", "cancelled", "shipped", "refunded"]
        for start in range(0, ORDERS, 5000):
            orders = Order.all_objects.bulk_create(
                Order(
                    number=new_order_number(),
                    customer=users[n % len(users)],
                    email=f"history{n % len(users)}@example.com",
                    idempotency_key=f"history-{n}",
                    idempotency_key_hash=f"{n:064d}",
                    idempotency_scope=f"user:{users[n % len(users)].pk}",
                    request_fingerprint="-",
                    status="awaiting_payment" if n % 20 == 0 else statuses[n % len(statuses)],
                    expires_at=now - timedelta(days=n % 365, minutes=1),
                    created_at=now - timedelta(days=n % 365),
                    **UNPRICED_ORDER,
                )
                for n in range(start, start + 5000)
            )
            PaymentEvent.all_objects.bulk_create(
                PaymentEvent(provider="local", event_id=f"evt_{o.number}", type="x", payload={}, processed_at=now)
                for o in orders
            )
            OrderEmail.all_objects.bulk_create(OrderEmail(order=o, kind="placed") for o in orders)
            OrderLine.all_objects.bulk_create(
                OrderLine(order=o, variant=variants[o.pk % PRODUCTS], quantity=1, unit_price=0, line_total=0)
                for o in orders
            )
            StockMovement.objects.bulk_create(
                StockMovement(stock=stocks[o.pk % PRODUCTS], kind="adjust", order=o, reason="history") for o in orders
            )
        with connection.cursor() as cursor:
            for table in GROWING:
                cursor.execute(f"ANALYZE TABLE {table}")
        yield users
        models.QuerySet(StockMovement).filter(stock__in=stocks).delete()  # a plain QuerySet: the ledger refuses
        OrderLine.all_objects.filter(variant__in=variants).hard_delete()
        OrderEmail.all_objects.filter(order__idempotency_key__startswith="history-").hard_delete()
        PaymentEvent.all_objects.filter(event_id__startswith="evt_").hard_delete()
        Order.all_objects.filter(idempotency_key__startswith="history-").hard_delete()
        Stock.objects.filter(pk__in=[stock.pk for stock in stocks]).delete()
        ProductVariant.all_objects.filter(pk__in=[variant.pk for variant in variants]).hard_delete()
        Product.all_objects.filter(name__startswith="History ").hard_delete()
        get_user_model().objects.filter(username__startswith="history").delete()


def plan(query) -> list[dict]:
    """EXPLAIN of a queryset, or of a statement as it was sent."""
    sql, params = query.query.sql_with_params() if isinstance(query, models.QuerySet) else (query, ())
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def full_scans(query) -> list[str]:
    """The growing tables the query's plan reads whole."""
    # A full scan: no index at all, or the primary key read in order with a filter no index serves.
    whole = [row for row in plan(query) if row["type"] == "ALL" or (row["type"] == "index" and row["key"] == "PRIMARY")]
    return [f"{row['table']} ({row['type']}, {row['rows']} rows)" for row in whole if row["table"] in GROWING]


def filesorts(query) -> list[str]:
    """The growing tables the query's plan sorts (rather than reading an index in order)."""
    sorted_ = [row for row in plan(query) if "filesort" in (row["Extra"] or "") and row["table"] in GROWING]
    return [f"{row['table']} ({row['type']}, key {row['key']}: {row['Extra']})" for row in sorted_]


def sent(pattern: str, call) -> str:
    """The one statement ``call`` sends that matches ``pattern`` (a regex), as sent."""
    with CaptureQueriesContext(connection) as queries:
        call()
    found = [query["sql"] for query in queries if re.search(pattern, query["sql"])]
    assert len(found) == 1, (pattern, [query["sql"] for query in queries])
    return found[0]


def api_get(path: str, *, username: str):
    """A GET of the API as this user; it must answer 200."""
    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(username=username))

    def get():
        response = client.get(path)
        assert response.status_code == 200, response.content

    return get


def looked_up(find, *, customer) -> str:
    """The statement ``find`` sends for one of ``customer``'s orders by its number."""
    number = Order.all_objects.filter(customer=customer).values_list("number", flat=True).first()
    return sent("FROM `orders_order`", lambda: find(number=number))


# The API's page and count of a customer's orders and of a stock's ledger, page 2 (an OFFSET).
COUNTED = r"^SELECT COUNT\(\*\) FROM \(SELECT .* FROM `{table}` .* LIMIT \d+\) subquery$"
PAGE = r"^SELECT (?!COUNT).* FROM `{table}` .* LIMIT \d+ OFFSET \d+$"
MY_ORDERS_PAGE = "/api/orders/?page=2"
LEDGER_PAGE = "/api/inventory/HISTORY-3/movements/?page=2"

QUERIES = {
    "placement: the idempotency key's order": lambda users: Order.all_objects.filter(
        idempotency_scope=f"user:{users[7].pk}", idempotency_key_hash=f"{7:064d}"
    ),
    "placement: overdue orders holding the cart's SKUs": lambda users: order_list_overdue_holding(skus=["MUG"]),
    "sweep: overdue orders to claim": lambda users: order_list_overdue().values_list("pk", flat=True)[:100],
    "my orders": lambda users: order_list_for_customer(customer=users[3])[:20],
    "api: my orders' page": lambda users: sent(
        PAGE.format(table="orders_order"), api_get(MY_ORDERS_PAGE, username=users[3].username)
    ),
    "api: my orders' count": lambda users: sent(
        COUNTED.format(table="orders_order"), api_get(MY_ORDERS_PAGE, username=users[3].username)
    ),
    "api: my orders' lines": lambda users: sent(
        "FROM `orders_orderline`", api_get(MY_ORDERS_PAGE, username=users[3].username)
    ),
    "order page: the customer's order": lambda users: looked_up(
        partial(order_find_for_customer, customer=users[3]), customer=users[3]
    ),
    "order page: staff's order by number": lambda users: looked_up(order_find_by_number, customer=users[3]),
    "api: the ledger's page": lambda users: sent(
        PAGE.format(table="inventory_stockmovement"), api_get(LEDGER_PAGE, username="historystaff")
    ),
    "api: the ledger's count": lambda users: sent(
        COUNTED.format(table="inventory_stockmovement"), api_get(LEDGER_PAGE, username="historystaff")
    ),
    "admin: the order list's page": lambda users: Order.all_objects.filter(is_deleted=False).order_by(
        "-created_at", "-id"
    )[:100],
    "prune: processed payment events": lambda users: PaymentEvent.all_objects.filter(
        processed_at__lt=timezone.now() - timedelta(days=30)
    ).values_list("pk", flat=True)[:5000],
    "prune: records of emails sent": lambda users: OrderEmail.all_objects.filter(
        created_at__lt=timezone.now() - timedelta(days=30)
    ).values_list("pk", flat=True)[:5000],
}

# Lists shown newest first: their pages read an index in that order.
NEWEST_FIRST = ["my orders", "api: my orders' page", "api: the ledger's page", "admin: the order list's page"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", QUERIES)
def test_the_query_reads_no_growing_table_whole(name, history):
    assert full_scans(QUERIES[name](history)) == []


@pytest.mark.django_db
@pytest.mark.parametrize("name", NEWEST_FIRST)
def test_a_list_newest_first_reads_an_index_in_order(name, history):
    assert filesorts(QUERIES[name](history)) == []
