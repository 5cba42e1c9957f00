"""Query plans pinned: the hot and periodic queries over the tables that grow with history use an index.

The tables hold tens of thousands of rows (orders in every status, most of them history), analysed, so
MariaDB's optimiser chooses as it would in a shop that has run for a while; a full scan of a growing
table (``type: ALL``, or the primary key read in order behind a filter no index serves) fails the test.
Reconcile's ledger sums are not here yet: they read the whole ledger by design until it checks from a
checkpoint.
"""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from bench.shipping import UNPRICED_ORDER
from orders.models import Order, OrderEmail, PaymentEvent, new_order_number
from orders.selectors import order_list_for_customer, order_list_overdue, order_list_overdue_holding

GROWING = {"orders_order", "orders_orderline", "orders_paymentevent", "orders_orderemail", "inventory_reservation"}
ORDERS = 30_000


@pytest.fixture(scope="module")
def history(django_db_setup, django_db_blocker):
    """ORDERS orders over 300 customers, a twentieth of them unpaid and overdue, with an event and an
    email each; analysed. Module-wide: built once, removed after."""
    with django_db_blocker.unblock():
        users = get_user_model().objects.bulk_create(
            get_user_model()(username=f"history{n}", email=f"history{n}@example.com") for n in range(300)
        )
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
        with connection.cursor() as cursor:
            for table in GROWING:
                cursor.execute(f"ANALYZE TABLE {table}")
        yield users
        OrderEmail.all_objects.filter(order__idempotency_key__startswith="history-").hard_delete()
        PaymentEvent.all_objects.filter(event_id__startswith="evt_").hard_delete()
        Order.all_objects.filter(idempotency_key__startswith="history-").hard_delete()
        get_user_model().objects.filter(username__startswith="history").delete()


def full_scans(queryset) -> list[str]:
    """The growing tables the query's plan reads whole."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [column[0] for column in cursor.description]
        plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    # A full scan: no index at all, or the primary key read in order with a filter no index serves.
    whole = [row for row in plan if row["type"] == "ALL" or (row["type"] == "index" and row["key"] == "PRIMARY")]
    return [f"{row['table']} ({row['type']}, {row['rows']} rows)" for row in whole if row["table"] in GROWING]


QUERIES = {
    "placement: the idempotency key's order": lambda users: Order.all_objects.filter(
        idempotency_scope=f"user:{users[7].pk}", idempotency_key_hash=f"{7:064d}"
    ),
    "placement: overdue orders holding the cart's SKUs": lambda users: order_list_overdue_holding(skus=["MUG"]),
    "sweep: overdue orders to claim": lambda users: order_list_overdue().values_list("pk", flat=True)[:100],
    "my orders": lambda users: order_list_for_customer(customer=users[3])[:20],
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


@pytest.mark.django_db
@pytest.mark.parametrize("name", QUERIES)
def test_the_query_reads_no_growing_table_whole(name, history):
    assert full_scans(QUERIES[name](history)) == []
