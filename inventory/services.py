"""Every stock change goes through here.

Each change follows the same order, which is the point of the whole project:

1. take the Redis locks of the SKUs involved (sorted, bounded wait) - ``locks.sku_locks``;
2. open a *durable* transaction inside the lock, so the commit happens while the lock is held
   (the reverse, seed 000's ``sell3``, lets the next holder read rows before our commit);
3. change the counters with a conditional UPDATE guarded in SQL (``WHERE on_hand - reserved >= n``)
   that bumps ``version``; CHECK constraints back it up. The lock is the fast path; the guard is
   what makes an expired or lost lock unable to oversell;
4. append the ledger rows (``StockMovement``) in the same transaction.
"""

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import msgspec
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.db import from_row, insert_returning, select_in, select_in_statement, statements_run
from core.errors import InvalidInput, InvalidQuantity
from inventory import locks, wire
from inventory.errors import (
    BelowReserved,
    DuplicateLine,
    InsufficientStock,
    LedgerInconsistent,
    LockTimeout,
    StaleStock,
)
from inventory.models import Reservation, Stock, StockMovement
from shop.models import sku_normalise
from shop.selectors import product_get_for_stock

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StockLine:
    sku: str
    quantity: int


class StockInvariantBroken(RuntimeError):
    """The counters disagree with the reservations: reconcile. Never expected; rolls back."""


# --- Input ------------------------------------------------------------------------------------


def _validate_count(value, *, field: str, maximum: int, minimum: int = 1) -> int:
    # bool is an int subclass; "2" and 2.0 are not quantities.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQuantity(fields={field: "Must be a whole number."})
    if not minimum <= value <= maximum:
        raise InvalidQuantity(fields={field: f"Must be between {minimum} and {maximum}."})
    return value


def stock_lines_validate(*, lines) -> list[StockLine]:
    """Check the shape of requested lines (no database): types, bounds, one line per SKU."""
    if not isinstance(lines, (list, tuple)) or not lines:
        raise InvalidInput(fields={"items": "Give at least one line."})
    if len(lines) > settings.MAX_ORDER_LINES:
        raise InvalidInput(fields={"items": f"At most {settings.MAX_ORDER_LINES} lines."})
    result = []
    for index, line in enumerate(lines):
        if isinstance(line, StockLine):
            sku, quantity = line.sku, line.quantity
        elif isinstance(line, dict):
            sku, quantity = line.get("sku"), line.get("quantity")
        else:
            raise InvalidInput(fields={f"items.{index}": "Each line needs a sku and a quantity."})
        sku = sku_normalise(sku, field=f"items.{index}.sku")
        quantity = _validate_count(quantity, field=f"items.{index}.quantity", maximum=settings.MAX_LINE_QUANTITY)
        result.append(StockLine(sku=sku, quantity=quantity))
    seen, duplicates = set(), set()
    for line in result:
        (duplicates if line.sku in seen else seen).add(line.sku)
    if duplicates:
        raise DuplicateLine(skus=sorted(duplicates))
    return result


# --- The critical section ---------------------------------------------------------------------


@contextmanager
def stock_section(*, skus: Iterable[str], lock_wait: float | None = None) -> Iterator[None]:
    """Lock the SKUs, then open the transaction: the commit happens before the locks go.

    ``durable=True`` refuses to run inside an outer transaction (``ATOMIC_REQUESTS``, a caller's
    ``atomic``), whose commit would come after the release. A service called from inside another
    service's section for the same SKUs joins it instead.
    """
    skus = set(skus)
    held = locks.held_skus()
    if held and skus <= held and transaction.get_connection().in_atomic_block:
        yield
        return
    with locks.sku_locks(skus, wait=lock_wait), transaction.atomic(durable=True):
        yield


# --- Group commit ------------------------------------------------------------------------------


_RUN_ALONE, _UNKNOWN = wire.answer_encode(wire.RunAlone()), wire.answer_encode(wire.Unknown())


def stock_section_combined(*, skus: Iterable[str], kind: str, request, result_type, execute: Callable[[list], list]):
    """``execute([request])[0]`` in the stock section of ``skus``: its result, raised if it is an error.

    ``execute`` takes a list of requests and returns a result (a ``result_type``) or a ``DomainError``
    instance per request. For one SKU the requests queue with the SKU lock
    (``locks.sku_lock_serving``): whoever holds it executes every queued request of the same ``kind``
    in its own transaction, one commit for all, then answers each. A hot SKU thus pays for one lock
    hold and one commit per *batch* rather than per buyer, and buyers are still served in queue
    order. Requests and answers travel through Redis as typed JSON (``inventory.wire``): ``request``
    is a dataclass or msgspec Struct, and queued requests are decoded as its type. Several SKUs, or a
    section already held, run alone.
    """
    skus = sorted(set(skus))
    outcome = wire.RunAlone()
    if len(skus) == 1 and not locks.held_skus():
        outcome = _served_or_serve(skus[0], kind=kind, request=request, result_type=result_type, execute=execute)
    if isinstance(outcome, wire.RunAlone):
        with stock_section(skus=skus):
            outcome = execute([request])[0]
    return _result(outcome)


def _served_or_serve(sku: str, *, kind: str, request, result_type, execute):
    """Our outcome: answered by the holder we queued behind, or as holder of a batch (ours first)."""
    with locks.sku_lock_serving(sku, kind=kind, body=wire.encode(request)) as (lock, answer):
        if lock is None:
            return _served_outcome(sku, kind=kind, answer=answer, result_type=result_type)
        return _serve(lock, sku=sku, kind=kind, request=request, execute=execute)


def _served_outcome(sku: str, *, kind: str, answer: bytes | None, result_type):
    """What the holder's answer says; an answer that never came, or does not fit, leaves the outcome unknown."""
    outcome = wire.Unknown()
    if answer is not None:
        try:
            outcome = wire.answer_decode(answer, result_type)
        except wire.Malformed as exc:
            logger.error("refused a malformed answer to a %s request on %s: %s", kind, sku, exc)
    if isinstance(outcome, wire.Unknown):
        return LockTimeout.outcome_unknown(skus=[sku])
    return outcome


def _serve(lock, *, sku: str, kind: str, request, execute):
    """As holder: our request and those we took, in one transaction; every taken waiter is answered.

    Whatever fails, each waiter gets its result, ``RunAlone`` (nothing was done for it) or, once the
    commit may have happened, ``Unknown`` (look it up); a request that does not decode is refused.
    Our own result stands once committed, whatever becomes of the answers.
    """
    answers = dict.fromkeys((waiter for waiter, _ in lock.taken), _RUN_ALONE)
    try:
        requests, waiters = [request], []
        for waiter, body in lock.taken:
            try:
                requests.append(wire.decode(body, type(request)))
                waiters.append(waiter)
            except wire.Malformed as exc:
                logger.error("refused a malformed %s request queued on %s: %s", kind, sku, exc)
        executed = False
        try:
            with transaction.atomic(durable=True):
                results = execute(requests)
                executed = True
        except BaseException:
            if executed:  # the commit itself failed: it may have happened
                answers.update(dict.fromkeys(waiters, _UNKNOWN))
            raise
        answers.update(dict.fromkeys(waiters, _UNKNOWN))
        for waiter, result in zip(waiters, results[1:], strict=True):
            try:
                answers[waiter] = wire.answer_encode(result)
            except Exception:
                logger.exception("could not encode the answer to a %s request on %s; it learns nothing", kind, sku)
        if len(requests) > 1:
            logger.debug("served %d %s requests on %s in one commit", len(requests), kind, sku)
        return results[0]
    finally:
        lock.answer(answers)


def _result(outcome):
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


# --- Reservations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    """Units one order asks of one SKU."""

    product_id: int
    sku: str
    quantity: int


# The outcome of a demand whose ``once_per`` key an earlier demand was already served under.
SERVED_EARLIER = "served_earlier"


def stock_allocate(
    *, demands: list[list[Demand]], free_more: Callable[[], int] | None = None, once_per: list | None = None
) -> list[list[dict] | str | None]:
    """Reserve for ``demands`` in order, each all or nothing, with one guarded UPDATE per SKU.

    If the stock does not cover every demand, ``free_more`` is called once, before any unit is
    reserved, and may free units (expire overdue orders); the demands are then served from what is
    left after it, still in order, so each gets the answer it would get alone. ``once_per`` gives
    each demand a key (an idempotency key): a demand whose key an earlier demand was served under
    gets ``SERVED_EARLIER`` and no units, and one whose earlier namesakes were refused is tried anew.

    Call inside the stock section. Returns per demand None (reserved), its shortages or
    ``SERVED_EARLIER``. What we read
    is current because we hold the locks; if a lock was lost and a rival changed a row since, its
    guarded UPDATE refuses and ``InsufficientStock`` rolls the section back. The statements are
    plain SQL: this is the hot path, and building them with the ORM cost more CPU than the database
    spent running them (bench/profile.py).
    """
    skus = {want.product_id: want.sku for demand in demands for want in demand}
    if len(skus) == 1:
        # One SKU (a hot SKU's batch, a one-line order): when its stock covers every demand, as it
        # does until a sell-out, one guarded UPDATE reserves them all; only a shortage needs the read.
        # Covered whole, each key's first demand is served and its namesakes are served earlier.
        [product_id] = skus
        firsts = _first_of_their_keys(once_per or [None] * len(demands))
        wanted = sum(w.quantity for demand, first in zip(demands, firsts, strict=True) if first for w in demand)
        if _stock_reserve_guarded_all(product_id, wanted):
            return [None if first else SERVED_EARLIER for first in firsts]
    stock_ids, left = _stock_counts(skus)
    outcomes, totals = _stock_shares(demands, left, once_per)
    if any(outcomes) and free_more is not None and free_more():
        stock_ids, left = _stock_counts(skus)
        outcomes, totals = _stock_shares(demands, left, once_per)
    for product_id, total in sorted(totals.items()):
        if not _stock_reserve_guarded(total, "id", stock_ids[product_id]):
            stock = Stock.objects.get(pk=stock_ids[product_id])
            raise InsufficientStock(
                shortages=[{"sku": skus[product_id], "requested": total, "available": stock.available}]
            )
    return outcomes


def _first_of_their_keys(keys: list) -> list[bool]:
    """Per key, whether no key before it is the same (None is never a repeat). One pass: a batch has 64."""
    seen, firsts = set(), []
    for key in keys:
        firsts.append(key is None or key not in seen)
        seen.add(key)
    return firsts


def _stock_shares(
    demands: list[list[Demand]], left: dict[int, int], once_per: list | None = None
) -> tuple[list[list[dict] | str | None], Counter]:
    """Which demands, in order, the ``left`` units by product cover whole: per demand None, its
    shortages or ``SERVED_EARLIER`` (see ``stock_allocate``), and the units to reserve by product."""
    totals, outcomes, served = Counter(), [], set()
    for index, demand in enumerate(demands):
        key = once_per[index] if once_per else None
        if key is not None and key in served:
            outcomes.append(SERVED_EARLIER)
            continue
        short = [
            {"sku": want.sku, "requested": want.quantity, "available": max(left.get(want.product_id, 0), 0)}
            for want in demand
            if left.get(want.product_id, 0) < want.quantity
        ]
        if not short:
            for want in demand:
                left[want.product_id] -= want.quantity
                totals[want.product_id] += want.quantity
            served.add(key)
        outcomes.append(short or None)
    return outcomes, totals


def _stock_counts(product_ids: Iterable[int]) -> tuple[dict[int, int], dict[int, int]]:
    """Stock row ids and available units, by product (products without a stock row have neither)."""
    rows = select_in(Stock, "product_id, id, on_hand - reserved", product_id=sorted(set(product_ids)))
    return {product_id: pk for product_id, pk, _ in rows}, {product_id: free for product_id, _, free in rows}


def _reserve_update(quantity: int, key_column: str, key: int) -> tuple[str, str, list]:
    """The guarded UPDATE that reserves ``quantity`` more units of the stock row ``key_column = key``.

    Returns its SET part, its WHERE part (the database's own guard: only if that many are free) and
    their parameters, so a caller can put a clause between them.
    """
    update = f"UPDATE {_table_of(Stock)} SET reserved = reserved + %s, version = version + 1, updated_at = %s"
    guard = f"WHERE {key_column} = %s AND on_hand >= reserved + %s"
    return update, guard, [quantity, connection.ops.adapt_datetimefield_value(timezone.now()), key, quantity]


def _stock_reserve_guarded_all(product_id: int, quantity: int) -> bool:
    """Reserve ``quantity`` more units of a product only if that many are free (no read before it)."""
    return _stock_reserve_guarded(quantity, "product_id", product_id)


def _stock_reserve_guarded(quantity: int, key_column: str, key: int) -> bool:
    """Reserve ``quantity`` more units of the stock row ``key_column = key`` only if that many are free."""
    update, guard, params = _reserve_update(quantity, key_column, key)
    with connection.cursor() as cursor:
        cursor.execute(f"{update} {guard}", params)
        return cursor.rowcount == 1


class LineToReserve(NamedTuple):
    """An order line that ``stock_allocate`` reserved units for, and until when."""

    line_id: int
    order_id: int
    product_id: int
    quantity: int
    expires_at: datetime


def stock_reservations_create(*, lines: list[LineToReserve]) -> list[dict]:
    """Reservation and ledger rows for lines that ``stock_allocate`` reserved units for, however many.

    Two INSERTs in one round trip (``statements_run``). Returns the reservation rows (``from_row``
    makes instances of them).
    """
    if not lines:
        return []
    statements, rows = _reservations_statements(lines)
    ids, recorded = statements_run(connection.alias, statements)
    return _reservations_inserted(rows, ids, recorded)


def _stock_reserve_one_product(requests: list[list[tuple[str, LineToReserve]]]) -> tuple[list, list[dict]]:
    """Reserve for requests that all ask for one product, each whole or not at all, in queue order.

    Per request None or its shortages, and the reservation rows. Until a sell-out the stock covers
    them all and this is one round trip; short, the stock's count comes back with the rollback.
    """
    lines = [line for request in requests for _, line in request]
    rows, available = _stock_reserve_all_recorded(lines)
    if rows is not None:
        return [None] * len(requests), rows
    demands = [[Demand(line.product_id, sku, line.quantity) for sku, line in request] for request in requests]
    outcomes, _ = _stock_shares(demands, {lines[0].product_id: available})
    covered = [line for request, short in zip(requests, outcomes, strict=True) if not short for _, line in request]
    if not covered:
        return outcomes, []
    rows, available = _stock_reserve_all_recorded(covered)
    if rows is None:  # a rival took units while we held the lock: it must have lost it
        total = sum(line.quantity for line in covered)
        raise InsufficientStock(shortages=[{"sku": requests[0][0][0], "requested": total, "available": available}])
    return outcomes, rows


def _stock_reserve_all_recorded(lines: list[LineToReserve]) -> tuple[list[dict] | None, int]:
    """Reserve every line, all of one product, with its rows, if the stock covers them all: one round trip.

    The reservation and ledger rows go first and the guarded UPDATE last, after a savepoint. Returns
    the reservation rows, or if the UPDATE found too few units free, None and how many were free
    (the rows rolled back). Each round trip saved is one every buyer queued on a hot SKU waits for.
    """
    product_id, savepoint = lines[0].product_id, "stock_reserve_all"
    statements, rows = _reservations_statements(lines)
    update, guard, params = _reserve_update(sum(line.quantity for line in lines), "product_id", product_id)
    _, ids, recorded, reserved = statements_run(
        connection.alias, [(f"SAVEPOINT {savepoint}", []), *statements, (f"{update} {guard}", params)]
    )
    if reserved:
        return _reservations_inserted(rows, ids, recorded), 0
    _, free = statements_run(
        connection.alias,
        [
            (f"ROLLBACK TO SAVEPOINT {savepoint}", []),
            select_in_statement(Stock, "on_hand - reserved", product_id=[product_id]),
        ],
    )
    return None, max(free[0][0], 0) if free else 0


def _reservations_statements(lines: list[LineToReserve]) -> tuple[list[tuple[str, list]], list[dict]]:
    """The INSERT of the lines' reservations and the INSERT of their ledger rows, and the reservation rows.

    The database builds the ledger rows from the reservations it has just stored, found by their
    common creation time and their order lines, so they need not wait for the new ids.
    """
    insert, params, rows = insert_returning(
        Reservation, [_reservation_row(line.line_id, line.product_id, line.quantity, line.expires_at) for line in lines]
    )
    line_ids = sorted({line.line_id for line in lines})
    movements, reservations, stocks = _table_of(StockMovement), _table_of(Reservation), _table_of(Stock)
    order_lines = _table_of(Reservation._meta.get_field("order_line").related_model)
    record = (
        f"INSERT INTO {movements} (stock_id, kind, on_hand_delta, reserved_delta, order_id, reservation_id, reason,"
        " created_at, updated_at)"
        f" SELECT s.id, %s, 0, r.quantity, l.order_id, r.id, '', r.created_at, r.updated_at FROM {reservations} r"
        f" JOIN {order_lines} l ON l.id = r.order_line_id JOIN {stocks} s ON s.product_id = r.product_id"
        f" WHERE {_first_new_id_bound()}r.created_at = %s AND r.order_line_id IN ({', '.join(['%s'] * len(line_ids))})"
        " ORDER BY r.id"
    )
    created_at = Reservation._meta.get_field("created_at").get_db_prep_save(rows[0]["created_at"], connection)
    return [(insert, params), (record, [StockMovement.Kind.RESERVE.value, created_at, *line_ids])], rows


def _first_new_id_bound() -> str:
    """On MySQL, a bound that has the ledger's INSERT look only at rows at least as new as ours.

    Without it the database may look the rows up by order line, and a line reserved again and
    again (released and reserved anew) would make every batch read more of them.
    """
    return "r.id >= LAST_INSERT_ID() AND " if connection.vendor == "mysql" else ""


def _reservations_inserted(rows: list[dict], ids: list[tuple], recorded: int) -> list[dict]:
    if recorded != len(rows):  # another batch's rows with our time and lines: never expected; rolls back
        raise StockInvariantBroken(f"{recorded} ledger rows for {len(rows)} new reservations")
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]


def _table_of(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _reservation_row(line_id: int, product_id: int, quantity: int, expires_at: datetime) -> dict:
    return {
        "order_line_id": line_id,
        "product_id": product_id,
        "quantity": quantity,
        "state": Reservation.State.ACTIVE.value,
        "expires_at": expires_at,
        "release_reason": "",
    }


class _ReserveRequest(msgspec.Struct, frozen=True, array_like=True):
    """A queued ``stock_reserve``: when its reservations expire, and per line (sku, line id, order id,
    product id, quantity). Ints and strings: the cheapest to encode and decode on a hot SKU."""

    expires_us: int
    lines: tuple[tuple[str, int, int, int, int], ...]


def stock_reserve(*, order, expires_at) -> list[Reservation]:
    """Reserve every line of ``order``, all or nothing; ``InsufficientStock`` lists every short line."""
    lines = tuple(
        (line.product.sku, line.pk, order.pk, line.product_id, line.quantity) for line in order.lines_with_products()
    )
    created_us, ids = stock_section_combined(
        skus=[line[0] for line in lines],
        kind="reserve",
        request=_ReserveRequest(_microseconds(expires_at), lines),
        result_type=tuple[int, tuple[int, ...]],
        execute=_stock_reserve_batch,
    )
    created_at = _datetime(created_us)
    return [
        from_row(
            Reservation,
            _reservation_row(line_id, product_id, quantity, expires_at)
            | {"id": pk, "created_at": created_at, "updated_at": created_at},
        )
        for pk, (_, line_id, _, product_id, quantity) in zip(ids, lines, strict=True)
    ]


_EPOCH, _MICROSECOND = datetime(1970, 1, 1, tzinfo=UTC), timedelta(microseconds=1)


def _microseconds(moment: datetime) -> int:
    """``moment`` as an int for a queued request or answer (exact: datetimes hold microseconds)."""
    return (moment - _EPOCH) // _MICROSECOND


def _datetime(microseconds: int) -> datetime:
    return _EPOCH + microseconds * _MICROSECOND


def _stock_reserve_batch(requests: list[_ReserveRequest]) -> list:
    """Per request, its shortage or what its buyer cannot know of the rows: their time and ids.

    The buyer has the rest, and an answer of ints travels cheaply (see ``_ReserveRequest``).
    """
    requests = [
        [(sku, LineToReserve(*ids, _datetime(request.expires_us))) for sku, *ids in request.lines]
        for request in requests
    ]
    if len({line.product_id for request in requests for _, line in request}) == 1:
        outcomes, rows = _stock_reserve_one_product(requests)
    else:
        demands = [[Demand(line.product_id, sku, line.quantity) for sku, line in request] for request in requests]
        outcomes = stock_allocate(demands=demands)
        reserved = [line for request, short in zip(requests, outcomes, strict=True) if not short for _, line in request]
        rows = stock_reservations_create(lines=reserved)
    created_us = _microseconds(rows[0]["created_at"]) if rows else 0  # one time for the whole batch
    ids = iter(row["id"] for row in rows)
    return [
        InsufficientStock(shortages=short) if short else (created_us, [next(ids) for _ in request])
        for request, short in zip(requests, outcomes, strict=True)
    ]


def stock_commit(*, order) -> list[Reservation]:
    """Turn the order's active reservations into sales. Twice is a no-op with the same result."""
    return _reservations_settle(order=order, state=Reservation.State.COMMITTED)


def stock_release(*, order, reason: str) -> list[Reservation]:
    """Give the order's reserved units back. Twice is a no-op with the same result."""
    if reason not in Reservation.ReleaseReason.values:
        raise InvalidInput(fields={"reason": f"One of {', '.join(Reservation.ReleaseReason.values)}."})
    return _reservations_settle(order=order, state=Reservation.State.RELEASED, reason=reason)


def _reservations_settle(*, order, state: str, reason: str = "") -> list[Reservation]:
    committing = state == Reservation.State.COMMITTED
    kind = StockMovement.Kind.COMMIT if committing else StockMovement.Kind.RELEASE
    order_reservations = Reservation.objects.filter(order_line__order=order)
    with stock_section(skus=order.skus):
        active = order_reservations.filter(state=Reservation.State.ACTIVE).select_related("product__stock")
        active = list(active.order_by("product_id"))
        stocks = {reservation.product_id: reservation.product.stock for reservation in active}
        movements = []
        for reservation in active:
            # The state flip is itself conditional, so a reservation settles once even if a lock is lost.
            if not Reservation.objects.filter(pk=reservation.pk, state=Reservation.State.ACTIVE).update(
                state=state, release_reason=reason
            ):
                continue
            quantity = reservation.quantity
            counters = {"reserved": F("reserved") - quantity, "version": F("version") + 1}
            if committing:
                counters["on_hand"] = F("on_hand") - quantity
            if not Stock.objects.filter(pk=stocks[reservation.product_id].pk, reserved__gte=quantity).update(
                **counters
            ):
                raise StockInvariantBroken(f"Stock {reservation.product_id} holds fewer than {quantity} reserved units")
            movements.append(
                StockMovement(
                    stock=stocks[reservation.product_id],
                    kind=kind,
                    on_hand_delta=-quantity if committing else 0,
                    reserved_delta=-quantity,
                    order=order,
                    reservation=reservation,
                    reason=reason,
                )
            )
        StockMovement.objects.bulk_create(movements)
        if movements and not committing:
            logger.info("released %d reservation(s) of order %s (%s)", len(movements), order.number, reason)
        return list(order_reservations.filter(state=state))


# --- Staff changes ----------------------------------------------------------------------------


def stock_restock(*, sku: str, quantity: int, reason: str = "restock", actor=None) -> Stock:
    """Add received units to on-hand stock."""
    quantity = _validate_count(quantity, field="quantity", maximum=settings.MAX_STOCK_QUANTITY)
    return _stock_change(sku=sku, kind=StockMovement.Kind.RESTOCK, delta=quantity, reason=reason, actor=actor)


def stock_adjust(
    *,
    sku: str,
    reason: str,
    delta: int | None = None,
    set_to: int | None = None,
    expected_version: int | None = None,
    actor=None,
) -> Stock:
    """Correct on-hand stock by ``delta`` or to ``set_to``; never below what is reserved.

    ``expected_version`` makes it a compare-and-set: a form read before a concurrent change is refused
    with ``stale_version`` rather than overwriting it.
    """
    if (delta is None) == (set_to is None):
        raise InvalidInput(fields={"delta": "Give exactly one of delta or set_to."})
    limit = settings.MAX_STOCK_QUANTITY
    if delta is not None:
        delta = _validate_count(delta, field="delta", minimum=-limit, maximum=limit)
        if delta == 0:
            raise InvalidQuantity(fields={"delta": "Must not be zero."})
    else:
        set_to = _validate_count(set_to, field="set_to", minimum=0, maximum=limit)
    if expected_version is not None:
        expected_version = _validate_count(expected_version, field="expected_version", minimum=0, maximum=2**31)
    return _stock_change(
        sku=sku,
        kind=StockMovement.Kind.ADJUST,
        delta=delta,
        set_to=set_to,
        expected_version=expected_version,
        reason=reason,
        actor=actor,
    )


def _stock_change(*, sku, kind, reason, actor, delta=None, set_to=None, expected_version=None) -> Stock:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(fields={"reason": "Say why the stock changes."})
    product = product_get_for_stock(sku=sku_normalise(sku))
    with stock_section(skus=[product.sku]):
        stock, _ = Stock.objects.get_or_create(product=product)
        if expected_version is not None and stock.version != expected_version:
            raise StaleStock(sku=product.sku, expected_version=expected_version, current_version=stock.version)
        if set_to is not None:
            delta = set_to - stock.on_hand
            if delta == 0:
                return stock
        # The version we read pins the row, so the ledger delta is exact even for set_to.
        guard = {
            "pk": stock.pk,
            "on_hand__gte": F("reserved") - delta,
            "on_hand__lte": settings.MAX_STOCK_QUANTITY - delta,
        }
        if set_to is not None or expected_version is not None:
            guard["version"] = stock.version
        if not Stock.objects.filter(**guard).update(on_hand=F("on_hand") + delta, version=F("version") + 1):
            stock.refresh_from_db()
            if stock.on_hand + delta > settings.MAX_STOCK_QUANTITY:
                raise InvalidQuantity(
                    fields={"quantity": f"On-hand stock cannot exceed {settings.MAX_STOCK_QUANTITY}."}
                )
            if stock.on_hand + delta < stock.reserved:
                raise BelowReserved(sku=product.sku, on_hand=stock.on_hand, reserved=stock.reserved)
            raise StaleStock(sku=product.sku, current_version=stock.version)
        StockMovement.objects.create(
            stock=stock, kind=kind, on_hand_delta=delta, reason=reason.strip()[:255], actor=actor
        )
        stock.refresh_from_db()
    logger.info("stock %s of %s by %+d to %d (%s)", kind, product.sku, delta, stock.on_hand, reason)
    return stock


# --- Repair -----------------------------------------------------------------------------------


def stock_rebuild_from_ledger(*, sku: str) -> Stock:
    """Set the counters to the ledger sums (the ledger is the record of truth), under the lock."""
    product = product_get_for_stock(sku=sku_normalise(sku))
    with stock_section(skus=[product.sku]):
        stock = Stock.objects.get(product=product)
        sums = StockMovement.objects.filter(stock=stock).aggregate(
            on_hand=Sum("on_hand_delta"), reserved=Sum("reserved_delta")
        )
        on_hand, reserved = sums["on_hand"] or 0, sums["reserved"] or 0
        if (stock.on_hand, stock.reserved) == (on_hand, reserved):
            return stock
        try:
            rebuilt = Stock.objects.filter(pk=stock.pk, version=stock.version).update(
                on_hand=on_hand, reserved=reserved, version=F("version") + 1
            )
        except IntegrityError as exc:
            raise LedgerInconsistent(sku=product.sku, ledger_on_hand=on_hand, ledger_reserved=reserved) from exc
        if not rebuilt:
            raise StaleStock(sku=product.sku)
        logger.warning(
            "stock drift fixed on %s: on_hand %d -> %d, reserved %d -> %d (rebuilt from the ledger)",
            product.sku,
            stock.on_hand,
            on_hand,
            stock.reserved,
            reserved,
        )
        stock.refresh_from_db()
    return stock
