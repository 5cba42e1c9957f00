"""Query plans pinned: the hot and periodic queries over the tables that grow with history use an index.

The tables hold tens of thousands of rows (orders in every status, most of them history, with a line and a
ledger row each), analysed, so MariaDB's optimiser chooses as it would in a shop that has run for a while;
a full scan of a growing table (``type: ALL``, or the primary key read in order behind a filter no index
serves) fails the test, and the lists read newest first must read an index in that order (no filesort).
The API's statements are the ones a request sends, captured; so are those of reconcile's checks (each of
the statements a check sends is read), in their default reading: what changed since the last clean run.
The ledger sums from checkpoints have a plan test of their own (tests/inventory/test_ledger_checkpoints.py).
"""

import re
from datetime import timedelta
from functools import partial

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, models
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from bench.shipping import UNPRICED_ORDER
from core.services import api_token_list_delete_expired
from inventory import sql
from inventory.models import Reservation, Stock, StockMovement
from orders.models import Order, OrderEmail, OrderLine, new_order_number
from orders.selectors import (
    order_find_by_number,
    order_find_for_customer,
    order_list_deleted_holding_stock,
    order_list_for_customer,
    order_list_overdue,
    order_list_overdue_holding,
    order_list_stuck_holding_stock,
)
from payments.drift import order_line_list_units_broken, order_list_refund_drift
from payments.models import Payment, PaymentEvent, Refund, RefundLine
from shop.models import Product, ProductVariant
from vouchers.models import Voucher, VoucherUse
from vouchers.selectors import voucher_books

GROWING = {
    "orders_order",
    "orders_orderline",
    "payments_paymentevent",
    "orders_orderemail",
    "payments_payment",
    "payments_refund",
    "payments_refundline",
    "inventory_reservation",
    "inventory_stockmovement",
    "vouchers_voucher",
    "vouchers_voucheruse",
    "knox_authtoken",
}
ORDERS = 30_000
PRODUCTS = 10
VOUCHERS = 3000  # codes of campaign after campaign: the vouchers grow with history too
TOKENS = 10_000


@pytest.fixture(scope="module")
def history(django_db_setup, django_db_blocker):
    """ORDERS orders over 300 customers, a twentieth of them unpaid and overdue, a tenth deleted, with an
    event, an email, a line of one of PRODUCTS products, its reservation (active while unpaid, and for a few
    final ones: drift) and a row in its ledger each; a seventh of them used one of VOUCHERS codes, a
    twenty-fifth were refunded (a payment, a refund and its line); TOKENS API tokens, a twentieth of them
    expired. Every row of an order was last changed when it was placed, over a year; analysed. Module-wide:
    built once, removed after. ``historystaff`` reads the ledger."""
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
        Voucher.objects.bulk_create(Voucher(code=f"HISTORY-{n}", kind="fixed", value=5) for n in range(VOUCHERS))
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
                    is_deleted=n % 10 == 1,
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
        AuthToken.objects.bulk_create(
            AuthToken(
                digest=f"history{n:0121d}",
                token_key=f"h{n:07d}",
                user=users[n % len(users)],
                expiry=now - timedelta(hours=1) if n % 20 == 0 else now + timedelta(hours=n % 24 + 1),
            )
            for n in range(TOKENS)
        )
        with connection.cursor() as cursor:
            for statement in HISTORY_OF_THE_ORDERS:
                cursor.execute(statement, {"orders": "history-%", "vouchers": VOUCHERS})
            # An UPDATE leaves its rows' old values in the indexes until InnoDB purges them, and the optimiser
            # counts them: the tables updated are rebuilt (OPTIMIZE: and analysed), the others analysed.
            for table in GROWING:
                cursor.execute(f"{'OPTIMIZE' if table in UPDATED else 'ANALYZE'} TABLE {table}")
        yield users
        AuthToken.objects.filter(digest__startswith="history").delete()
        orders = Order.all_objects.filter(idempotency_key__startswith="history-")
        RefundLine.all_objects.filter(refund__order__in=orders).hard_delete()
        Refund.all_objects.filter(order__in=orders).hard_delete()
        Payment.all_objects.filter(order__in=orders).hard_delete()
        VoucherUse.all_objects.filter(order__in=orders).hard_delete()
        Voucher.all_objects.filter(code__startswith="HISTORY-").hard_delete()
        Reservation.objects.filter(variant__in=variants).delete()
        models.QuerySet(StockMovement).filter(stock__in=stocks).delete()  # a plain QuerySet: the ledger refuses
        OrderLine.all_objects.filter(variant__in=variants).hard_delete()
        OrderEmail.all_objects.filter(order__idempotency_key__startswith="history-").hard_delete()
        PaymentEvent.all_objects.filter(event_id__startswith="evt_").hard_delete()
        orders.hard_delete()
        Stock.objects.filter(pk__in=[stock.pk for stock in stocks]).delete()
        ProductVariant.all_objects.filter(pk__in=[variant.pk for variant in variants]).hard_delete()
        Product.all_objects.filter(name__startswith="History ").hard_delete()
        get_user_model().objects.filter(username__startswith="history").delete()


UPDATED = {"orders_order", "orders_orderline", "vouchers_voucher"}  # by HISTORY_OF_THE_ORDERS
# What happened to the orders since they were placed, in SQL (many rows, fast): reservations, voucher uses,
# refunds; each row of an order last changed when it was placed.
HISTORY_OF_THE_ORDERS = [
    "UPDATE orders_order SET updated_at = created_at WHERE idempotency_key LIKE %(orders)s",
    "UPDATE orders_orderline l JOIN orders_order o ON o.id = l.order_id SET l.created_at = o.created_at,"
    " l.updated_at = o.created_at, l.quantity_refunded = o.id %% 25 = 0 WHERE o.idempotency_key LIKE %(orders)s",
    "INSERT INTO inventory_reservation (created_at, updated_at, order_line_id, variant_id, quantity, state,"
    " expires_at, release_reason) SELECT l.created_at, l.created_at, l.id, l.variant_id, 1,"
    " IF(o.status = 'awaiting_payment' OR o.id %% 499 = 0, 'active', 'committed'), o.expires_at, ''"
    " FROM orders_orderline l JOIN orders_order o ON o.id = l.order_id WHERE o.idempotency_key LIKE %(orders)s",
    "INSERT INTO vouchers_voucheruse (created_at, updated_at, is_deleted, voucher_id, order_id, buyer, state, discount)"
    " SELECT o.created_at, o.created_at, 0, v.id, o.id, o.idempotency_scope,"
    " IF(o.status = 'awaiting_payment', 'reserved', 'committed'), 0 FROM orders_order o"
    " JOIN vouchers_voucher v ON v.code = CONCAT('HISTORY-', o.id %% %(vouchers)s)"
    " WHERE o.id %% 7 = 0 AND o.idempotency_key LIKE %(orders)s",
    "UPDATE vouchers_voucher v SET v.updated_at = COALESCE((SELECT MAX(u.updated_at) FROM vouchers_voucheruse u"
    " WHERE u.voucher_id = v.id), v.updated_at) WHERE v.code LIKE 'HISTORY-%%'",
    "INSERT INTO payments_payment (created_at, updated_at, is_deleted, order_id, provider, attempt, reference,"
    " redirect_url, provider_payment, amount, currency, charged_currency, amount_refunded, state) SELECT o.created_at,"
    " o.created_at, 0, o.id, 'local', 1, CONCAT('history-', o.number), '', '', 0, 'EUR', '', 0, 'refunded'"
    " FROM orders_order o"
    " WHERE o.id %% 25 = 0 AND o.idempotency_key LIKE %(orders)s",
    "INSERT INTO payments_refund (created_at, updated_at, is_deleted, order_id, payment_id, state, source, amount,"
    " shipping, restock) SELECT p.created_at, p.created_at, 0, p.order_id, p.id, 'succeeded', 'staff', 0, 0, 0"
    " FROM payments_payment p WHERE p.reference LIKE %(orders)s",
    "INSERT INTO payments_refundline (created_at, updated_at, is_deleted, refund_id, order_line_id, quantity, amount,"
    " quantity_restocked) SELECT r.created_at, r.created_at, 0, r.id, l.id, 1, 0, 0 FROM payments_refund r"
    " JOIN orders_orderline l ON l.order_id = r.order_id JOIN orders_order o ON o.id = r.order_id"
    " WHERE o.idempotency_key LIKE %(orders)s",
]


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


def orders_read_but_by_id(sql: str) -> list[str]:
    """How the statement's plan reads orders other than by id: a lookup by primary key, or a range no longer
    than the ids it names (``id IN (...)``). Orders read under an alias count too."""
    orders = {"orders_order", *re.findall(r"`orders_order` (\w+)", sql)}
    named = re.search(r"`orders_order`\.`id` IN \(([^)]*)\)", sql)
    ids = len(named.group(1).split(",")) if named else 0

    def by_id(row) -> bool:
        return row["type"] in ("eq_ref", "const") or (row["type"] == "range" and int(row["rows"]) <= ids)

    read = [row for row in plan(sql) if row["table"] in orders and not by_id(row)]
    return [f"{row['table']} ({row['type']}, key {row['key']}, {row['rows']} rows)" for row in read]


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


def statements(call) -> list[str]:
    """Every statement ``call`` sends that reads or writes rows (a queryset it returns read too), as sent."""
    with CaptureQueriesContext(connection) as queries:
        answer = call()
        if isinstance(answer, models.QuerySet):
            list(answer)
    return [query["sql"] for query in queries if re.match(r"(SELECT|UPDATE|DELETE) ", query["sql"])]


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
    "sweep: the claim's locked read of its candidates": lambda users: (
        order_list_overdue()
        .filter(pk__in=list(order_list_overdue().values_list("pk", flat=True)[:400]))
        .filter(Q(sweep_lease_until__isnull=True) | Q(sweep_lease_until__lt=timezone.now()))
        .select_for_update(skip_locked=True)
        .values_list("pk", flat=True)[:200]
    ),
    "sweep: the claimed orders' lines and SKUs": lambda users: OrderLine.objects.filter(
        order_id__in=list(order_list_overdue().values_list("pk", flat=True)[:200])
    ).values_list("order_id", "variant__sku", "quantity"),
    "settle: a section's active reservations, locked, through their lines": lambda users: sent(
        "FROM `orders_orderline` l",
        lambda: sql.reservations_active_of_orders(
            order_ids=list(order_list_overdue().values_list("pk", flat=True)[:25])
        ),
    ),
    "sweep: a section's due orders, locked": lambda users: (
        order_list_overdue()
        .filter(pk__in=list(order_list_overdue().values_list("pk", flat=True)[:25]))
        .select_for_update()
        .values_list("pk", flat=True)
    ),
    "my orders": lambda users: order_list_for_customer(customer=users[3])[:20],
    "api: my orders' page": lambda users: sent(
        PAGE.format(table="orders_order"), api_get(MY_ORDERS_PAGE, username=users[3].username)
    ),
    "api: my orders' count": lambda users: sent(
        COUNTED.format(table="orders_order"), api_get(MY_ORDERS_PAGE, username=users[3].username)
    ),
    # The page's orders' lines, by order; when those orders have refunds, their refund lines' order lines are
    # read too, by id (which of history3's orders are refunded follows the ids the tests before left).
    "api: my orders' lines": lambda users: sent(
        r"FROM `orders_orderline`.*`orders_orderline`.`order_id` IN",
        api_get(MY_ORDERS_PAGE, username=users[3].username),
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


def since_the_last_clean_run():
    """Where reconcile's checks read from by default (``orders.services.reconciling.reconcile_since``): an hour ago, so
    they read what the orders placed today changed."""
    return timezone.now() - timedelta(hours=1)


# Checks and prunes that send several statements: each of them is read for full scans.
CHECKS = {
    "reconcile: final orders holding stock": lambda users: order_list_stuck_holding_stock(),
    "reconcile: deleted orders holding stock": lambda users: order_list_deleted_holding_stock(),
    "reconcile: refund drift since its last clean run": lambda users: order_list_refund_drift(
        since=since_the_last_clean_run()
    ),
    "reconcile: the unit rule since its last clean run": lambda users: order_line_list_units_broken(
        since=since_the_last_clean_run()
    ),
    "reconcile: voucher books since their last clean run": lambda users: voucher_books(
        since=since_the_last_clean_run()
    ),
    "prune: expired API tokens": lambda users: api_token_list_delete_expired(),
}

# Checks driven by the few rows they look for, never by the orders, which grow with history.
DRIVEN_BY_THE_FEW = ["reconcile: final orders holding stock", "reconcile: deleted orders holding stock"]

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


@pytest.mark.django_db
@pytest.mark.parametrize("name", CHECKS)
def test_each_statement_of_a_check_reads_no_growing_table_whole(name, history):
    scans = {sql: full_scans(sql) for sql in statements(lambda: CHECKS[name](history))}
    assert {sql: scanned for sql, scanned in scans.items() if scanned} == {}


@pytest.mark.django_db
@pytest.mark.parametrize("name", DRIVEN_BY_THE_FEW)
def test_a_holding_stock_check_starts_from_the_reservations_and_uses_and_reads_orders_by_id(name, history):
    reads = {sql: orders_read_but_by_id(sql) for sql in statements(lambda: CHECKS[name](history))}
    assert {sql: read for sql, read in reads.items() if read} == {}
