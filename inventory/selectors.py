"""Reads of stock state: what the counters say, what the ledger and the reservations say."""

from dataclasses import dataclass

from django.db.models import F, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from core.errors import InvalidInput
from inventory.models import LedgerCheckpoint, Reservation, Stock, StockMovement
from shop.models import sku_normalise


@dataclass(frozen=True)
class StockBooks:
    sku: str
    on_hand: int
    reserved: int
    ledger_on_hand: int
    ledger_reserved: int
    active_reserved: int

    def describe(self) -> str:
        return (
            f"{self.sku}: on_hand {self.on_hand} vs ledger {self.ledger_on_hand}, reserved {self.reserved} "
            f"vs ledger {self.ledger_reserved} vs active reservations {self.active_reserved}"
        )

    @property
    def drifted(self) -> bool:
        return (self.on_hand, self.reserved) != (self.ledger_on_hand, self.ledger_reserved) or (
            self.reserved != self.active_reserved
        )


def _sum_per_stock(queryset, field, *, link="stock", outer="pk"):
    total = queryset.filter(**{link: OuterRef(outer)}).values(link).annotate(total=Sum(field)).values("total")
    return Coalesce(Subquery(total, output_field=IntegerField()), Value(0))


def stock_books(*, skus=None, full: bool = False) -> list[StockBooks]:
    """Per stock: counters beside the ledger sums and the active reservations (one query, so one moment)."""
    return [
        StockBooks(
            sku=stock.variant.sku,
            on_hand=stock.on_hand,
            reserved=stock.reserved,
            ledger_on_hand=stock.ledger_on_hand,
            ledger_reserved=stock.ledger_reserved,
            active_reserved=stock.active_reserved,
        )
        for stock in _stocks_with_books(skus=skus, full=full)
    ]


def _stocks_with_books(*, skus, full: bool):
    """All the stocks in one query for ``full``; else a query per stock, each one a range of the ledger."""
    if full:
        yield from stock_list_with_books(skus=skus, full=True)
        return
    stocks = Stock.objects.order_by("variant__sku")
    if skus:
        stocks = stocks.filter(variant__sku__in=skus)
    for pk in stocks.values_list("pk", flat=True):
        yield from stock_list_with_books(pk=pk)


def stock_list_with_books(*, skus=None, pk: int | None = None, full: bool = False) -> QuerySet[Stock]:
    """The stocks, each with ``ledger_on_hand``, ``ledger_reserved`` and ``active_reserved``.

    The ledger sums are the stock's checkpoint plus the movements after it (``LedgerCheckpoint``): what
    is read follows recent activity. ``full``: the whole ledger, however long. The range of the ledger
    after a checkpoint is read as a range of its (stock, id) index only for one stock (``pk``): MariaDB
    reads every index entry of each stock when the query covers several.
    """
    stocks = Stock.objects.select_related("variant").order_by("variant__sku")
    if skus:
        stocks = stocks.filter(variant__sku__in=skus)
    if pk is not None:
        stocks = stocks.filter(pk=pk)
    movements = StockMovement.objects.all()
    on_hand, reserved = Value(0), Value(0)
    if not full:
        movements = movements.filter(pk__gt=Coalesce(OuterRef("checkpoint__through_movement_id"), 0))
        on_hand = Coalesce(F("checkpoint__on_hand"), 0)
        reserved = Coalesce(F("checkpoint__reserved"), 0)
    return stocks.annotate(
        ledger_on_hand=on_hand + _sum_per_stock(movements, "on_hand_delta"),
        ledger_reserved=reserved + _sum_per_stock(movements, "reserved_delta"),
        active_reserved=_sum_per_stock(
            Reservation.objects.filter(state=Reservation.State.ACTIVE),
            "quantity",
            link="variant",
            outer="variant_id",
        ),
    )


@dataclass(frozen=True)
class CheckpointBooks:
    """A ledger checkpoint beside the sums of the movements it covers: they must agree."""

    sku: str
    through_movement_id: int
    on_hand: int
    reserved: int
    ledger_on_hand: int
    ledger_reserved: int

    def describe(self) -> str:
        return (
            f"{self.sku}: checkpoint through movement {self.through_movement_id} says on_hand {self.on_hand}, "
            f"reserved {self.reserved}; its movements sum to {self.ledger_on_hand}, {self.ledger_reserved}"
        )


def ledger_checkpoint_list_unverified() -> list[CheckpointBooks]:
    """The checkpoints whose sums differ from the movements they cover (reads the whole ledger)."""
    covered = StockMovement.objects.filter(pk__lte=OuterRef("through_movement_id"))
    checkpoints = LedgerCheckpoint.objects.select_related("stock__variant").annotate(
        ledger_on_hand=_sum_per_stock(covered, "on_hand_delta", outer="stock_id"),
        ledger_reserved=_sum_per_stock(covered, "reserved_delta", outer="stock_id"),
    )
    return [
        CheckpointBooks(
            sku=c.stock.variant.sku,
            through_movement_id=c.through_movement_id,
            on_hand=c.on_hand,
            reserved=c.reserved,
            ledger_on_hand=c.ledger_on_hand,
            ledger_reserved=c.ledger_reserved,
        )
        for c in checkpoints.order_by("stock__variant__sku")
        if (c.on_hand, c.reserved) != (c.ledger_on_hand, c.ledger_reserved)
    ]


def stock_find(*, sku: str) -> Stock | None:
    """The stock of a product that is not deleted (active or not), for staff; None for a SKU no product has."""
    try:
        sku = sku_normalise(sku)
    except InvalidInput:
        return None  # no product could have it
    return Stock.objects.select_related("variant").filter(variant__sku=sku, variant__is_deleted=False).first()


def stock_movement_list(*, stock: Stock) -> QuerySet[StockMovement]:
    """The ledger of one stock, newest first."""
    return StockMovement.objects.filter(stock=stock).select_related("order", "actor").order_by("-id")


def reservation_count_active() -> int:
    """Reservations holding units now (read by the state index: the active ones are few, the rest history)."""
    return Reservation.objects.filter(state=Reservation.State.ACTIVE).count()
