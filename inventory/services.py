"""Every stock change goes through here.

Each change runs in the stock section of its SKUs (``inventory.section``: their Redis locks, then a
transaction committed while they are held), changes the counters with a conditional UPDATE guarded
in SQL that bumps ``version`` (CHECK constraints back it up), and appends its ledger rows
(``StockMovement``) in the same transaction. Reservations on one SKU queue for its lock and are
carried out in batches (``inventory.batching``).
"""

import logging
from collections import Counter
from datetime import datetime

import msgspec
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum

from core.db import from_row, insert_defaults, statements_run
from core.errors import InvalidInput, InvalidQuantity
from inventory import sql
from inventory.batching import Batch, Demand, stock_section_batched
from inventory.errors import (
    BelowReserved,
    DuplicateLine,
    LedgerInconsistent,
    StaleStock,
    StockInvariantBroken,
)
from inventory.models import LedgerCheckpoint, Reservation, Stock, StockMovement
from inventory.section import stock_section
from inventory.selectors import ledger_settled_through
from shop.models import sku_normalise
from shop.selectors import variant_get_for_stock

logger = logging.getLogger(__name__)


class StockLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A requested line. Queued requests carry it, so a field it does not know is refused, never dropped
    (``inventory.locks.wire``)."""

    sku: str
    quantity: int


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


class ReservationLine(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """An order line to reserve units for: what a reservation row needs of it, and the SKU to lock."""

    sku: str
    line_id: int
    variant_id: int
    quantity: int


def stock_reservations_create_for_orders(*, order_ids: list[int], lines: int, expires_at: datetime, statements) -> list:
    """An active reservation and its ledger row for each of the ``lines`` lines of these new orders, whose
    units the caller's batch has reserved, after the caller's ``statements`` (the INSERT of those lines),
    all in one round trip: what the statements returned."""
    *returned, reserved, recorded = statements_run(
        connection.alias,
        [*statements, *sql.reservations_for_orders_statements(order_ids=order_ids, expires_at=expires_at)],
    )
    if reserved != lines or recorded != lines:  # never expected; the transaction rolls back
        raise StockInvariantBroken(f"{reserved} reservations and {recorded} ledger rows for {lines} new lines")
    return returned


def _reservation_row(line: ReservationLine, expires_at: datetime) -> dict:
    """What a new reservation is given; the insert fills the rest (active, no release reason, timestamps)."""
    return {
        "order_line_id": line.line_id,
        "variant_id": line.variant_id,
        "quantity": line.quantity,
        "expires_at": expires_at,
    }


class _ReserveRequest(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A ``stock_reserve`` as it queues for a hot SKU's lock holder: an order's lines, and until when."""

    expires_at: datetime
    lines: tuple[ReservationLine, ...]


class _Reserved(msgspec.Struct, array_like=True):
    """What the holder tells a buyer of its reservations: their ids, in line order, and creation time.

    Filled in when the batch writes its rows; the buyer has the rest in its own request.
    """

    ids: list[int] = []
    created_at: datetime | None = None


class _ReserveBatch(Batch):
    """``stock_reserve`` requests carried out together: each order's lines, all or nothing."""

    kind, request_type, result_type = "reserve", _ReserveRequest, _Reserved

    def __init__(self, requests: list[_ReserveRequest]):
        super().__init__(requests)
        self._variant_ids = {line.variant_id for request in requests for line in request.lines}

    def variant_ids(self) -> set[int]:
        return self._variant_ids

    def step(self, request: _ReserveRequest) -> _Reserved:
        self.stock.take([Demand(line.variant_id, line.sku, line.quantity) for line in request.lines])
        reserved = _Reserved()
        self.stage((request, reserved))
        return reserved

    def write(self) -> bool:
        """The reservation and ledger rows and the guarded UPDATEs, in one round trip."""
        rows = [_reservation_row(line, request.expires_at) for request, _ in self.staged for line in request.lines]
        if not rows:
            return True
        statements, rows = sql.reservations_statements(rows)
        results = self.stock.reserve(statements)
        if results is None:
            return False
        stored = sql.reservations_stored(rows, results)
        ids = iter(row["id"] for row in stored)
        for request, result in self.staged:
            result.ids, result.created_at = [next(ids) for _ in request.lines], stored[0]["created_at"]
        return True


def stock_reserve(*, order, expires_at: datetime) -> list[Reservation]:
    """Reserve every line of ``order``, all or nothing; ``InsufficientStock`` lists every short line."""
    lines = tuple(
        ReservationLine(line.variant.sku, line.pk, line.variant_id, line.quantity)
        for line in order.lines_with_variants()
    )
    reserved = stock_section_batched(
        skus=[line.sku for line in lines], batch_type=_ReserveBatch, request=_ReserveRequest(expires_at, lines)
    )
    return [
        from_row(
            Reservation,
            insert_defaults(Reservation)
            | _reservation_row(line, expires_at)
            | {"id": pk, "created_at": reserved.created_at, "updated_at": reserved.created_at},
        )
        for pk, line in zip(reserved.ids, lines, strict=True)
    ]


def stock_commit(*, order) -> list[Reservation]:
    """Turn the order's active reservations into sales. Twice is a no-op with the same result."""
    _reservations_settle(order_ids=[order.pk], skus=order.skus, state=Reservation.State.COMMITTED)
    return list(Reservation.objects.filter(order_line__order=order, state=Reservation.State.COMMITTED))


def stock_release(*, order, reason: str) -> list[Reservation]:
    """Give the order's reserved units back. Twice is a no-op with the same result."""
    stock_list_release(order_ids=[order.pk], skus=order.skus, reason=reason)
    return list(Reservation.objects.filter(order_line__order=order, state=Reservation.State.RELEASED))


def stock_list_release(*, order_ids: list[int], skus, reason: str) -> int:
    """Give back the reserved units of these orders (``skus``: all their SKUs); how many reservations."""
    if reason not in Reservation.ReleaseReason.values:
        raise InvalidInput(fields={"reason": f"One of {', '.join(Reservation.ReleaseReason.values)}."})
    return _reservations_settle(order_ids=order_ids, skus=skus, state=Reservation.State.RELEASED, reason=reason)


def _reservations_settle(*, order_ids: list[int], skus, state: str, reason: str = "") -> int:
    """Settle the active reservations of these orders, set-based: the same statements for one order or a
    sweep's batch (``inventory.sql``). The reservations' rows are locked before they flip, so each
    settles once even if a lock is lost; the counters' UPDATE is guarded. How many settled."""
    committing = state == Reservation.State.COMMITTED
    with stock_section(skus=skus):
        active = sql.reservations_active_of_orders(order_ids=order_ids)
        if not active:
            return 0
        sql.reservations_settle(reservations=active, state=state, reason=reason, committing=committing)
    if not committing:
        logger.info("released %d reservation(s) of %d order(s) (%s)", len(active), len(order_ids), reason)
    return len(active)


def stock_restock(
    *, sku: str, quantity: int, reason: str = "restock", actor=None, order=None, order_line=None
) -> Stock:
    """Add received units to on-hand stock; ``order`` and ``order_line`` name the refund that returned them."""
    quantity = _validate_count(quantity, field="quantity", maximum=settings.MAX_STOCK_QUANTITY)
    return _stock_change(
        sku=sku,
        kind=StockMovement.Kind.RESTOCK,
        delta=quantity,
        reason=reason,
        actor=actor,
        order=order,
        order_line=order_line,
    )


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


def _stock_change(
    *, sku, kind, reason, actor, delta=None, set_to=None, expected_version=None, order=None, order_line=None
) -> Stock:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput(fields={"reason": "Say why the stock changes."})
    variant = variant_get_for_stock(sku=sku_normalise(sku))
    with stock_section(skus=[variant.sku]):
        stock, _ = Stock.objects.get_or_create(variant=variant)
        if expected_version is not None and stock.version != expected_version:
            raise StaleStock(sku=variant.sku, expected_version=expected_version, current_version=stock.version)
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
                raise BelowReserved(sku=variant.sku, on_hand=stock.on_hand, reserved=stock.reserved)
            raise StaleStock(sku=variant.sku, current_version=stock.version)
        StockMovement.objects.create(
            stock=stock,
            kind=kind,
            on_hand_delta=delta,
            reason=reason.strip()[:255],
            actor=actor,
            order=order,
            order_line=order_line,
        )
        stock.refresh_from_db()
    logger.info("stock %s of %s by %+d to %d (%s)", kind, variant.sku, delta, stock.on_hand, reason)
    return stock


def stock_rebuild_from_ledger(*, sku: str) -> Stock:
    """Set the counters to the ledger sums (the ledger is the record of truth), under the lock."""
    variant = variant_get_for_stock(sku=sku_normalise(sku))
    with stock_section(skus=[variant.sku]):
        stock = Stock.objects.get(variant=variant)
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
            raise LedgerInconsistent(sku=variant.sku, ledger_on_hand=on_hand, ledger_reserved=reserved) from exc
        if not rebuilt:
            raise StaleStock(sku=variant.sku)
        logger.warning(
            "stock drift fixed on %s: on_hand %d -> %d, reserved %d -> %d (rebuilt from the ledger)",
            variant.sku,
            stock.on_hand,
            on_hand,
            stock.reserved,
            reserved,
        )
        stock.refresh_from_db()
    return stock


def ledger_checkpoint_list_take() -> int:
    """Move every stock's checkpoint through the newest settled movement (``sql.ledger_settled_through``:
    every movement older than LEDGER_CHECKPOINT_MARGIN_SECONDS): its last sums plus the movements since.

    The stocks whose checkpoints are through the same movement (all of them, once the first run is done)
    are moved by one read of the ledger's range since, in id order, so the cost follows the activity
    since the last run, not the history nor the number of stocks; a stock new since, or whose checkpoint
    was rebuilt, by a range of its own. The margin, not a stock lock, is what makes the sums final, so no
    buyer waits; the checkpoints' rows are locked, so two runs at once move them once. How many moved.
    """
    through = ledger_settled_through()
    if through is None:
        return 0
    with transaction.atomic():
        checkpoints = {c.stock_id: c for c in LedgerCheckpoint.objects.select_for_update().order_by("stock_id")}
        behind = {
            stock_id: checkpoints.get(stock_id) or LedgerCheckpoint(stock_id=stock_id, through_movement_id=0)
            for stock_id in Stock.objects.order_by("pk").values_list("pk", flat=True)
        }
        behind = {pk: c for pk, c in behind.items() if c.through_movement_id < through}
        if not behind:
            return 0
        [(common, _)] = Counter(c.through_movement_id for c in behind.values()).most_common(1)
        shared = sql.ledger_sums_by_stock(after_id=common, through_id=through)
        for stock_id, checkpoint in behind.items():
            since = (
                shared.get(stock_id, sql.LedgerSums(0, 0))
                if checkpoint.through_movement_id == common
                else sql.ledger_sums_of_stock(
                    stock_id=stock_id, after_id=checkpoint.through_movement_id, through_id=through
                )
            )
            checkpoint.on_hand = (checkpoint.on_hand or 0) + since.on_hand
            checkpoint.reserved = (checkpoint.reserved or 0) + since.reserved
            checkpoint.through_movement_id = through
            checkpoint.save()
    return len(behind)


def ledger_checkpoint_rebuild(*, stock: Stock) -> LedgerCheckpoint:
    """Sum the stock's ledger again, from its first movement through its checkpoint's (one that does not
    match its ledger)."""
    with transaction.atomic():
        checkpoint = LedgerCheckpoint.objects.select_for_update().get(stock=stock)
        sums = sql.ledger_sums_of_stock(stock_id=stock.pk, after_id=0, through_id=checkpoint.through_movement_id)
        checkpoint.on_hand, checkpoint.reserved = sums
        checkpoint.save()
    logger.warning("ledger checkpoint of %s rebuilt from the whole ledger", stock.variant.sku)
    return checkpoint
