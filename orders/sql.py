"""The order hot path's plain-SQL statements, each by name (the stock's are in ``inventory.sql``).

A lock holder runs these once per batch of queued orders, while every buyer in the queue waits.
Built with the ORM they cost more CPU than the database spends running them (see the profile in
docs/benchmarks.md). Everything off the hot path uses the ORM.
"""

from django.db import connection

from core.db import insert_returning, select_in_statement, statements_run
from orders.models import Order, OrderLine


def order_ids_with_keys(*, scopes, key_hashes) -> list[int]:
    """Ids of the orders placed under any of these idempotency scopes and key hashes.

    Both columns are given so the (scope, hash) unique index answers it, not a scan of every order.
    """
    [rows] = statements_run(connection.alias, [order_ids_with_keys_statement(scopes=scopes, key_hashes=key_hashes)])
    return [pk for (pk,) in rows]


def order_ids_with_keys_statement(*, scopes, key_hashes) -> tuple[str, list]:
    """``order_ids_with_keys``'s statement, for a caller that sends it with others (``statements_run``)."""
    return select_in_statement(Order, "id", idempotency_scope=sorted(scopes), idempotency_key_hash=sorted(key_hashes))


def orders_insert_statement(*, rows: list[dict]) -> tuple[tuple[str, list], list[dict]]:
    """The INSERT of order rows (``Order`` attnames), to send with the stock's guarded UPDATEs, and the
    rows with their defaults; ``orders_stored`` reads what it returns."""
    sql, params, rows = insert_returning(Order, rows)
    return (sql, params), rows


def orders_stored(rows: list[dict], ids: list[tuple]) -> list[dict]:
    """The order rows as stored, with ``id`` and timestamps, from what their INSERT returned."""
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]


def order_lines_insert_statement(*, rows: list[dict]) -> tuple[tuple[str, list], list[dict]]:
    """The INSERT of order line rows, to send with their reservations' (``order_lines_stored`` reads what it
    returns), and the rows with their defaults."""
    sql, params, rows = insert_returning(OrderLine, rows)
    return (sql, params), rows


def order_lines_stored(rows: list[dict], ids: list[tuple]) -> list[dict]:
    """The order line rows as stored, with ``id``, from what their INSERT returned."""
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]
