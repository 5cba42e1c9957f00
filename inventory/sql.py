"""The stock hot path's plain-SQL statements, each by name.

A lock holder runs these once per batch while every buyer queued on the SKU waits for it. Each
function takes keyword parameters and returns its result by name; the statements of one function
go to the database in one round trip (``statements_run``). Built with the ORM, they cost more CPU
than the database spends running them (see docs/benchmarks.md). Everything off the hot path uses
the ORM.
"""

from collections import Counter
from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.utils import timezone

from core.db import insert_returning, select_in, select_in_statement, statements_run
from inventory.errors import StockInvariantBroken
from inventory.models import Reservation, Stock, StockMovement


class Reserved(NamedTuple):
    results: list | None  # what the statements sent along returned; None: refused, nothing was written
    available: dict[int, int]  # units free by product after reserving; refused: of the products refused
    refused: list[int]  # the products too few units were free of (their guarded UPDATE changed nothing)


def reserved_add_if_free(*, quantities: dict[int, int], statements: list[tuple[str, list]] = ()) -> Reserved:
    """Add each product's quantity to its reserved units, only if that many are free: the database's guard.

    All or nothing, with ``statements`` (inserts of the rows the units are for) sent first, in one
    round trip after a savepoint, with the free counts read last, so nothing is read before: the
    guarded UPDATEs come last, and a hot row stays locked only until the commit. Refused, the
    savepoint is rolled back: nothing was written.
    """
    savepoint = "reserved_add_if_free"
    variant_ids = list(quantities)
    updates = [_reserved_add_statement(variant_id=p, quantity=q) for p, q in quantities.items()]
    left = select_in_statement(Stock, "variant_id, on_hand - reserved", variant_id=variant_ids)
    _, *results = statements_run(connection.alias, [(f"SAVEPOINT {savepoint}", []), *statements, *updates, left])
    free = dict(results[-1])
    done = results[len(statements) : -1]
    refused = [variant_id for variant_id, count in zip(variant_ids, done, strict=True) if not count]
    if not refused:
        return Reserved(results[: len(statements)], free, [])
    statements_run(connection.alias, [(f"ROLLBACK TO SAVEPOINT {savepoint}", [])])
    # A refused UPDATE changed nothing, so what the read found free of that product is what was free.
    return Reserved(None, {variant_id: max(free.get(variant_id, 0), 0) for variant_id in refused}, refused)


def stock_available(*, variant_ids) -> dict[int, int]:
    """Units free (on hand minus reserved) by product; a product without a stock row is missing."""
    if not variant_ids:
        return {}
    rows = select_in(Stock, "variant_id, on_hand - reserved", variant_id=sorted(set(variant_ids)))
    return {variant_id: available for variant_id, available in rows}


def reservations_first_expiry(*, variant_ids) -> dict[int, datetime]:
    """When each product's first active reservation expires (on the database's clock); none: missing."""
    reservations = _table_of(Reservation)
    variant_ids = sorted(set(variant_ids))
    [rows] = statements_run(
        connection.alias,
        [
            (
                f"SELECT variant_id, MIN(expires_at) FROM {reservations} WHERE state = %s"
                f" AND variant_id IN ({', '.join(['%s'] * len(variant_ids))}) GROUP BY variant_id",
                [Reservation.State.ACTIVE.value, *variant_ids],
            )
        ],
    )
    convert = connection.ops.convert_datetimefield_value
    return {variant_id: convert(first, None, connection) for variant_id, first in rows}


def _reserved_add_statement(*, variant_id: int, quantity: int) -> tuple[str, list]:
    stock = _table_of(Stock)
    sql = (
        f"UPDATE {stock} SET reserved = reserved + %s, version = version + 1, updated_at = %s"
        " WHERE variant_id = %s AND on_hand >= reserved + %s"
    )
    return sql, [quantity, connection.ops.adapt_datetimefield_value(timezone.now()), variant_id, quantity]


class Held(NamedTuple):
    pk: int
    variant_id: int
    quantity: int


def reservations_active_of_orders(*, order_ids: list[int]) -> list[Held]:
    """These orders' active reservations by id, their rows locked (and their lines'): read through the
    orders' lines, whose index MariaDB does not choose on its own when most reservations are active."""
    reservations = _table_of(Reservation)
    straight = "STRAIGHT_JOIN " if connection.vendor == "mysql" else ""
    locking = " FOR UPDATE" if connection.features.has_select_for_update else ""  # SQLite locks the file
    [rows] = statements_run(
        connection.alias,
        [
            (
                f"SELECT {straight}r.id, r.variant_id, r.quantity FROM {_order_lines_table()} l"
                f" JOIN {reservations} r ON r.order_line_id = l.id"
                f" WHERE l.order_id IN ({', '.join(['%s'] * len(order_ids))}) AND r.state = %s"
                f" ORDER BY r.id{locking}",
                [*order_ids, Reservation.State.ACTIVE.value],
            )
        ],
    )
    return [Held(*row) for row in rows]


def reservations_settle(*, reservations: list, state: str, reason: str, committing: bool) -> None:
    """Settle these locked active reservations (``pk``, ``variant_id``, ``quantity``) in one round trip:
    flip their state, take their units off each product's reserved count (``committing``: off on hand
    too), guarded so no count goes below what it holds, and append their ledger rows, which the
    database builds from the reservations, their lines and stocks (no row goes through Python)."""
    reservation_table, stock, movements = _table_of(Reservation), _table_of(Stock), _table_of(StockMovement)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    ids = [r.pk for r in reservations]
    in_ids = ", ".join(["%s"] * len(ids))
    units = Counter()
    for r in reservations:
        units[r.variant_id] += r.quantity
    variant_ids = sorted(units)
    each = "CASE variant_id " + " ".join(["WHEN %s THEN %s"] * len(units)) + " END"
    pairs = [value for variant_id in variant_ids for value in (variant_id, units[variant_id])]
    on_hand = f"on_hand = on_hand - {each}, " if committing else ""
    counters = (
        f"UPDATE {stock} SET {on_hand}reserved = reserved - {each}, version = version + 1, updated_at = %s"
        f" WHERE variant_id IN ({', '.join(['%s'] * len(units))}) AND reserved >= {each}",
        [*(pairs if committing else []), *pairs, now, *variant_ids, *pairs],
    )
    kind = StockMovement.Kind.COMMIT if committing else StockMovement.Kind.RELEASE
    record = (
        f"INSERT INTO {movements} (stock_id, kind, on_hand_delta, reserved_delta, order_id, reservation_id, reason,"
        " created_at, updated_at)"
        f" SELECT s.id, %s, {'-r.quantity' if committing else '0'}, -r.quantity, l.order_id, r.id, %s, %s, %s"
        f" FROM {reservation_table} r JOIN {_order_lines_table()} l ON l.id = r.order_line_id"
        f" JOIN {stock} s ON s.variant_id = r.variant_id WHERE r.id IN ({in_ids}) ORDER BY r.id",
        [kind.value, reason, now, now, *ids],
    )
    flip = (
        f"UPDATE {reservation_table} SET state = %s, release_reason = %s, updated_at = %s WHERE id IN ({in_ids})",
        [state, reason, now, *ids],
    )
    flipped, changed, recorded = statements_run(connection.alias, [flip, counters, record])
    if changed != len(units):
        raise StockInvariantBroken(
            f"{len(units) - changed} of {len(units)} stocks hold fewer reserved units than are settled"
        )
    if flipped != len(ids) or recorded != len(ids):  # never expected of locked rows; rolls back
        raise StockInvariantBroken(f"{flipped} reservations settled, {recorded} ledger rows, for {len(ids)}")


def reservations_statements(rows: list[dict]) -> tuple[list[tuple[str, list]], list[dict]]:
    """The INSERT of the reservations and the INSERT of their ledger rows, and the rows with defaults
    (``reservations_stored`` reads what the two statements return).

    The ledger's INSERT needs no ids: the database finds the new reservations by their common
    creation time and order lines.
    """
    insert, params, rows = insert_returning(Reservation, rows)
    created_at = Reservation._meta.get_field("created_at").get_db_prep_save(rows[0]["created_at"], connection)
    record = _ledger_of_new_reservations(created_at, "r.order_line_id", sorted({row["order_line_id"] for row in rows}))
    return [(insert, params), record], rows


def reservations_for_orders_statements(*, order_ids: list[int], expires_at: datetime) -> list[tuple[str, list]]:
    """An active reservation for every line of these new orders, and its ledger row: two INSERT ... SELECTs,
    for a caller that inserts the lines in the same round trip (their ids are not known when it is sent).

    Each statement returns its row count: one per line, or the transaction must not commit.
    """
    reservations, order_lines = _table_of(Reservation), _order_lines_table()
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    insert = (
        f"INSERT INTO {reservations} (created_at, updated_at, order_line_id, variant_id, quantity, state, expires_at,"
        f" release_reason) SELECT %s, %s, l.id, l.variant_id, l.quantity, %s, %s, '' FROM {order_lines} l"
        f" WHERE l.order_id IN ({', '.join(['%s'] * len(order_ids))}) ORDER BY l.id"
    )
    expires = connection.ops.adapt_datetimefield_value(expires_at)
    return [
        (insert, [now, now, Reservation.State.ACTIVE.value, expires, *order_ids]),
        _ledger_of_new_reservations(now, "l.order_id", order_ids),
    ]


def _ledger_of_new_reservations(created_at, column: str, values: list) -> tuple[str, list]:
    """The INSERT ... SELECT of a ``reserve`` ledger row for each reservation created at ``created_at``
    whose ``column`` (of the reservation ``r`` or its order line ``l``) is one of ``values``: it needs
    no ids, the database finds the new reservations."""
    movements, reservations, stocks = _table_of(StockMovement), _table_of(Reservation), _table_of(Stock)
    record = (
        f"INSERT INTO {movements} (stock_id, kind, on_hand_delta, reserved_delta, order_id, reservation_id, reason,"
        " created_at, updated_at)"
        f" SELECT s.id, %s, 0, r.quantity, l.order_id, r.id, '', r.created_at, r.updated_at FROM {reservations} r"
        f" JOIN {_order_lines_table()} l ON l.id = r.order_line_id JOIN {stocks} s ON s.variant_id = r.variant_id"
        f" WHERE {_first_new_id_bound()}r.created_at = %s AND {column} IN ({', '.join(['%s'] * len(values))})"
        " ORDER BY r.id"
    )
    return record, [StockMovement.Kind.RESERVE.value, created_at, *values]


def _order_lines_table() -> str:
    return _table_of(Reservation._meta.get_field("order_line").related_model)


def _first_new_id_bound() -> str:
    """On MySQL, a bound that has the ledger's INSERT look only at rows at least as new as ours.

    Without it the database may look the rows up by order line, and a line reserved again and
    again (released and reserved anew) would make every batch read more of them.
    """
    return "r.id >= LAST_INSERT_ID() AND " if connection.vendor == "mysql" else ""


def reservations_stored(rows: list[dict], results: list) -> list[dict]:
    """The reservation rows as stored, from what ``reservations_statements`` returned when run."""
    ids, recorded = results
    if recorded != len(rows):  # another batch's rows with our time and lines: never expected; rolls back
        raise StockInvariantBroken(f"{recorded} ledger rows for {len(rows)} new reservations")
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]


def _table_of(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def lock_wait_statements(*, seconds: int) -> tuple[tuple[str, list], tuple[str, list]] | None:
    """The statements that set this connection's row-lock wait to ``seconds``, and back to the server's
    default: InnoDB's. None on SQLite, which has no row locks: its writing transaction holds the whole
    file from its start (``transaction_mode`` IMMEDIATE), so rows need no lock of their own."""
    if connection.vendor != "mysql":
        return None
    return ("SET SESSION innodb_lock_wait_timeout = %s", [seconds]), (
        "SET SESSION innodb_lock_wait_timeout = DEFAULT",
        [],
    )


class LedgerSums(NamedTuple):
    on_hand: int
    reserved: int


def ledger_settled_through(*, before: datetime) -> int | None:
    """The newest committed movement below the first one created at ``before`` or later (None: none is).

    A movement's id is taken before its transaction commits, and its creation time within it: an id below
    this one still uncommitted would belong to a transaction older than ``before`` (the caller's margin is
    longer than any transaction lives), so every movement up to it is final. Read by the ledger's
    ``created_at`` index (recent entries only) and its primary key from the end."""
    movements = _table_of(StockMovement)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN(id) FROM {movements} WHERE created_at >= %s", [before])
        (first_recent,) = cursor.fetchone()
        below = "WHERE id < %s" if first_recent is not None else ""
        cursor.execute(f"SELECT MAX(id) FROM {movements} {below}", [first_recent] if below else [])
        return cursor.fetchone()[0]


def ledger_sums_by_stock(*, after_id: int, through_id: int) -> dict[int, LedgerSums]:
    """Each stock's sums of the movements with ids in (``after_id``, ``through_id``], by stock id: one read
    of that range of the ledger in id order (sequential however many stocks share it)."""
    movements = _table_of(StockMovement)
    primary = " FORCE INDEX (PRIMARY)" if connection.vendor == "mysql" else ""  # SQLite has no index hints
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT stock_id, SUM(on_hand_delta), SUM(reserved_delta) FROM {movements}{primary}"
            " WHERE id > %s AND id <= %s GROUP BY stock_id",
            [after_id, through_id],
        )
        return {stock_id: LedgerSums(int(on_hand), int(reserved)) for stock_id, on_hand, reserved in cursor.fetchall()}


def ledger_sums_of_stock(*, stock_id: int, after_id: int, through_id: int) -> LedgerSums:
    """One stock's sums of its movements with ids in (``after_id``, ``through_id``]: a range of the ledger's
    (stock, id) index."""
    movements = _table_of(StockMovement)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COALESCE(SUM(on_hand_delta), 0), COALESCE(SUM(reserved_delta), 0) FROM {movements}"
            " WHERE stock_id = %s AND id > %s AND id <= %s",
            [stock_id, after_id, through_id],
        )
        on_hand, reserved = cursor.fetchone()
    return LedgerSums(int(on_hand), int(reserved))
