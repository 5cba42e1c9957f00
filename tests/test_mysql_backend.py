"""config/mysql: back-to-back transactions skip the autocommit switches, and nothing else changes."""

import MySQLdb
import pytest
from django.db import connection, transaction

from inventory.models import Stock
from inventory.services import stock_reserve
from orders.models import Order
from orders.services import order_place

pytestmark = pytest.mark.django_db(transaction=True)

STOCK_TABLE = f"`{Stock._meta.db_table}`"
COUNTERS = ("Com_set_option", "Com_savepoint", "Com_commit", "Com_update", "Questions")


def statements_sent(action) -> dict[str, int]:
    """What this connection sent to MariaDB during ``action``, by the server's own counters.

    Counts the status read that ends the measurement too, and the switch to autocommit just before it.
    """
    read = f"SHOW SESSION STATUS WHERE Variable_name IN ({', '.join(['%s'] * len(COUNTERS))})"
    with connection.cursor() as cursor:
        cursor.execute(read, COUNTERS)
        before = dict(cursor.fetchall())
    action()
    with connection.cursor() as cursor:
        cursor.execute(read, COUNTERS)
        after = dict(cursor.fetchall())
    return {name: int(after[name]) - int(before[name]) for name in COUNTERS}


def committed_on_hand(stock_id: int) -> int:
    """As another connection sees it: only what is committed."""
    other = MySQLdb.connect(**connection.get_connection_params())
    try:
        cursor = other.cursor()
        cursor.execute(f"SELECT on_hand FROM {STOCK_TABLE} WHERE id = %s", [stock_id])
        return cursor.fetchone()[0]
    finally:
        other.close()


def test_back_to_back_atomic_blocks_switch_autocommit_off_once_and_on_once_in_all():
    def three_blocks():
        for _ in range(3):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT 1")

    sent = statements_sent(three_blocks)

    # Django's own backend switches off and on around each block: 6. Here: off before the first
    # block, on just before the status read, the first statement outside a transaction.
    assert (sent["Com_set_option"], sent["Com_commit"]) == (2, 3)
    assert connection.get_autocommit()


def test_two_reservations_in_a_row_cost_their_statements_and_one_switch_off_and_on_in_all(make_variant):
    make_variant(sku="SKU-0", stock=10)
    placed = [
        order_place(email="a@example.com", items=[{"sku": "SKU-0", "quantity": 1}], idempotency_key=key) for key in "ab"
    ]
    orders = list(Order.objects.prefetch_related("lines__variant").filter(pk__in=[order.pk for order in placed]))

    sent = statements_sent(lambda: [stock_reserve(order=order, expires_at=order.expires_at) for order in orders])

    # Each reservation: savepoint, reservations, ledger rows, guarded UPDATE and the units it left (one
    # round trip), COMMIT (6 statements), and the two switches and the status read.
    assert sent == {
        "Com_set_option": 2,
        "Com_savepoint": 2,
        "Com_commit": 2,
        "Com_update": 2,
        "Questions": 2 * 6 + 2 + 1,
    }


@pytest.mark.parametrize("cursor_opened", ["before the block", "after the block"])
def test_a_statement_outside_a_transaction_after_a_block_is_committed_at_once(make_variant, cursor_opened):
    stock = make_variant(sku="SKU-0", stock=10).stock
    early_cursor = connection.cursor()
    with transaction.atomic():
        Stock.objects.filter(pk=stock.pk).update(on_hand=11)
    cursor = early_cursor if cursor_opened == "before the block" else connection.cursor()
    with cursor:
        cursor.execute(f"UPDATE {STOCK_TABLE} SET on_hand = 12 WHERE id = %s", [stock.pk])

    assert committed_on_hand(stock.pk) == 12


def test_after_a_rolled_back_block_the_next_change_is_committed_at_once(make_variant):
    stock = make_variant(sku="SKU-0", stock=10).stock
    with pytest.raises(RuntimeError), transaction.atomic():
        Stock.objects.filter(pk=stock.pk).update(on_hand=11)
        raise RuntimeError("roll back")
    assert committed_on_hand(stock.pk) == 10

    Stock.objects.filter(pk=stock.pk).update(on_hand=13)

    assert committed_on_hand(stock.pk) == 13
