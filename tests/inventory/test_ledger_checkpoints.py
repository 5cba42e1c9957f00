"""Ledger checkpoints: the books are checked from each stock's last checkpoint plus the movements after
it, so the check reads recent activity, not history; ``reconcile --full`` reads everything and
verifies the checkpoints."""

import threading
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from inventory.models import LedgerCheckpoint, Stock, StockMovement
from inventory.selectors import (
    LedgerBase,
    ledger_bases,
    ledger_checkpoint_list_unverified,
    stock_books,
    stock_with_books,
)
from inventory.services import ledger_checkpoint_list_take, stock_restock
from orders.services import order_place
from orders.tasks import reconcile_stock
from tests.conftest import ledger_sums, stock_of


def explain_sql(sql: str) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture(autouse=True)
def no_margin(settings):
    """Checkpoints here cover every movement, however recent (the margin has a test of its own)."""
    settings.LEDGER_CHECKPOINT_MARGIN_SECONDS = 0


def newest_movement(stock: Stock) -> int:
    return StockMovement.objects.filter(stock=stock).order_by("-pk").values_list("pk", flat=True)[0]


@pytest.mark.django_db
def test_the_reconcile_task_moves_each_checkpoint_through_the_newest_movement(make_variant, customer):
    mug, tee = make_variant(sku="MUG", stock=10), make_variant(sku="TEE", stock=5)
    order_place(
        customer=customer, items=[{"sku": "MUG", "quantity": 2}, {"sku": "TEE", "quantity": 1}], idempotency_key="a"
    )

    assert reconcile_stock() == 0

    for variant, sums in [(mug, (10, 2)), (tee, (5, 1))]:
        checkpoint = LedgerCheckpoint.objects.get(stock=stock_of(variant))
        assert (checkpoint.on_hand, checkpoint.reserved) == sums == ledger_sums(stock_of(variant))
        assert checkpoint.through_movement_id == StockMovement.objects.order_by("-pk")[0].pk
    stock_restock(sku="MUG", quantity=4)
    assert ledger_checkpoint_list_take() == 2  # both move through the newest movement
    assert LedgerCheckpoint.objects.get(stock=stock_of(mug)).on_hand == 14
    assert LedgerCheckpoint.objects.get(stock=stock_of(tee)).on_hand == 5


@pytest.mark.django_db
def test_every_stocks_checkpoint_moves_by_one_read_of_the_ledger_since(make_variant, customer):
    """However many stocks: the ledger is read three times (where it is settled, by two index reads, and
    its range since the last checkpoints, in id order), never once per stock."""
    for n in range(12):
        make_variant(sku=f"SKU{n}", stock=10)
    ledger_checkpoint_list_take()
    for n in range(12):
        order_place(customer=customer, items=[{"sku": f"SKU{n}", "quantity": 1}], idempotency_key=f"k{n}")

    with CaptureQueriesContext(connection) as queries:
        assert ledger_checkpoint_list_take() == 12

    assert len([q for q in queries if "FROM `inventory_stockmovement`" in q["sql"]]) == 3
    assert ledger_checkpoint_list_unverified(summed=ledger_bases(full=True)) == []
    for n in range(12):
        checkpoint = LedgerCheckpoint.objects.get(stock__variant__sku=f"SKU{n}")
        assert (checkpoint.on_hand, checkpoint.reserved) == (10, 1)


@pytest.mark.django_db
def test_drift_after_a_checkpoint_is_found_from_it_and_by_a_full_reading(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    reconcile_stock()
    with connection.cursor() as cursor:  # a bad hand edit, behind the service's back
        cursor.execute("UPDATE inventory_stock SET reserved = 1 WHERE id = %s", [stock_of(mug).pk])

    for args in [(), ("--full",)]:
        with pytest.raises(CommandError) as error:
            run("reconcile", *args)
        assert error.value.returncode == 1
    assert [row.sku for row in stock_books() if row.drifted] == [
        row.sku for row in stock_books(bases=ledger_bases(full=True)) if row.drifted
    ]
    assert reconcile_stock() == 1

    run("reconcile", "--fix")
    assert stock_of(mug).reserved == 2
    run("reconcile", "--full")  # exits 0 now


@pytest.mark.django_db
def test_the_check_reads_no_history_before_the_checkpoint_and_the_full_one_verifies_it(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    reconcile_stock()
    restocked = StockMovement.objects.get(stock=stock_of(mug), kind="restock")
    with connection.cursor() as cursor:  # history rewritten behind the ledger's back
        cursor.execute("UPDATE inventory_stockmovement SET on_hand_delta = 9 WHERE id = %s", [restocked.pk])

    assert "0 drifted" in run("reconcile")  # from the checkpoint: what came before it is not read again
    with pytest.raises(CommandError):
        run("reconcile", "--full")
    [wrong] = ledger_checkpoint_list_unverified(summed=ledger_bases(full=True))
    assert (wrong.sku, wrong.on_hand, wrong.ledger_on_hand) == ("MUG", 10, 9)

    output = run("reconcile", "--full", "--fix")  # the checkpoint from the ledger, the counters too
    assert "Ledger checkpoints: 0 disagree" in output.split("Repaired")[1]
    assert LedgerCheckpoint.objects.get(stock=stock_of(mug)).on_hand == 9 == stock_of(mug).on_hand


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_never_covers_a_movement_whose_writer_lost_its_lock_and_has_not_committed(make_variant, settings):
    """Two writers on one stock, their locks lost: the first takes its movement's id, then waits for the
    second's row lock; the second writes a newer movement and commits; the first's stays uncommitted.
    A checkpoint taken then stops before both (they are recent): the first one's commit is counted."""
    settings.LEDGER_CHECKPOINT_MARGIN_SECONDS = 300
    mug = make_variant(sku="MUG", stock=10)
    stock = stock_of(mug)
    with connection.cursor() as cursor:  # the restock is history: older than the margin
        cursor.execute("UPDATE inventory_stockmovement SET created_at = created_at - INTERVAL 1 HOUR")
    inserted, commit = threading.Event(), threading.Event()

    def first_writer():
        try:
            with transaction.atomic():
                StockMovement.objects.create(stock=stock, kind="restock", on_hand_delta=3, reason="first")
                inserted.set()
                commit.wait(10)
                Stock.objects.filter(pk=stock.pk).update(on_hand=F("on_hand") + 3)
        finally:
            connection.close()

    writer = threading.Thread(target=first_writer)
    with transaction.atomic():  # the second writer, as stock_restock writes: counters first, then the ledger
        Stock.objects.filter(pk=stock.pk).update(on_hand=F("on_hand") + 2)
        writer.start()
        _wait_for_a_query_like("INSERT INTO `inventory_stockmovement`%")  # its id taken, waiting for our row
        StockMovement.objects.create(stock=stock, kind="restock", on_hand_delta=2, reason="second")
    assert inserted.wait(10)

    ledger_checkpoint_list_take()
    checkpoint = LedgerCheckpoint.objects.get(stock=stock)
    commit.set()
    writer.join(10)

    assert (checkpoint.on_hand, checkpoint.through_movement_id) == (
        10,
        StockMovement.objects.get(kind="restock", reason="initial stock").pk,
    )
    assert stock_of(mug).on_hand == 15
    assert not [row for row in stock_books() if row.drifted]


def _wait_for_a_query_like(pattern: str, seconds: float = 10) -> None:
    with connection.cursor() as cursor:
        for _ in range(int(seconds / 0.05)):
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE %s",
                [pattern],
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"no other connection ran a query like {pattern!r} within {seconds} s")


@pytest.mark.django_db(transaction=True)  # ANALYZE commits: the tables are flushed after the test
def test_the_check_from_checkpoints_reads_the_ledger_by_stock_and_id_not_whole(make_variant):
    variants = [make_variant(sku=f"SKU{n}", stock=100) for n in range(20)]
    StockMovement.objects.bulk_create(
        StockMovement(stock=stock_of(variants[n % 20]), kind="adjust", on_hand_delta=0, reason="history")
        for n in range(20_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE inventory_stockmovement")
    ledger_checkpoint_list_take()

    checkpoint = LedgerCheckpoint.objects.get(stock=stock_of(variants[3]))
    with CaptureQueriesContext(connection) as queries:
        stock_with_books(pk=checkpoint.stock_id, base=LedgerBase(checkpoint.through_movement_id, 0, 0))
    plan = explain_sql(queries[-1]["sql"])

    ledger = [row for row in plan if "inventory_s_stock_i" in (row["possible_keys"] or "")]  # the movements' subqueries
    # A range from the checkpoint on (of the primary key, or of the (stock, id) index), not every entry
    # of the stock (``ref``), not the whole ledger.
    assert len(ledger) == 2 and all(row["type"] == "range" for row in ledger), plan
