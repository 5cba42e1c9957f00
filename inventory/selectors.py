"""Reads of stock state: what the counters say, what the ledger and the reservations say."""

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from core.clock import db_now
from core.errors import InvalidInput
from inventory import sql
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


class LedgerBase(NamedTuple):
    """A stock's ledger sums through one movement: the books add the stock's movements after it."""

    through_movement_id: int
    on_hand: int
    reserved: int


NO_BASE = LedgerBase(0, 0, 0)


def ledger_settled_through() -> int | None:
    """The newest movement a checkpoint may cover: every movement up to it is older than
    LEDGER_CHECKPOINT_MARGIN_SECONDS, longer than any transaction lives, so none below it is still to come."""
    return sql.ledger_settled_through(before=db_now() - timedelta(seconds=settings.LEDGER_CHECKPOINT_MARGIN_SECONDS))


def ledger_bases(*, full: bool = False) -> dict[int, LedgerBase]:
    """Each stock's base for its books, by stock id: its checkpoint; ``full``: the whole ledger summed again
    now, in one read in id order, through the movement most checkpoints are through (else the settled one),
    so the same sums verify the checkpoints (``ledger_checkpoint_list_unverified``)."""
    checkpoints = {
        c.stock_id: LedgerBase(c.through_movement_id, c.on_hand, c.reserved) for c in LedgerCheckpoint.objects.all()
    }
    if not full:
        return checkpoints
    common = Counter(base.through_movement_id for base in checkpoints.values()).most_common(1)
    through = common[0][0] if common else ledger_settled_through()
    if through is None:
        return {}
    summed = sql.ledger_sums_by_stock(after_id=0, through_id=through)
    return {stock_id: LedgerBase(through, *sums) for stock_id, sums in summed.items()}


def stock_books(*, skus=None, bases: dict[int, LedgerBase] | None = None) -> list[StockBooks]:
    """Per stock: counters beside the ledger sums and the active reservations, each stock in one statement
    (one moment). The ledger sums are its base (``bases``, by default its checkpoint) plus its movements
    after it: what is read follows the activity since, not the history."""
    bases = ledger_bases() if bases is None else bases
    stocks = Stock.objects.order_by("variant__sku")
    if skus:
        stocks = stocks.filter(variant__sku__in=skus)
    books = []
    for pk in stocks.values_list("pk", flat=True):
        stock = stock_with_books(pk=pk, base=bases.get(pk, NO_BASE))
        books.append(
            StockBooks(
                sku=stock.variant.sku,
                on_hand=stock.on_hand,
                reserved=stock.reserved,
                ledger_on_hand=stock.ledger_on_hand,
                ledger_reserved=stock.ledger_reserved,
                active_reserved=stock.active_reserved,
            )
        )
    return books


def stock_with_books(*, pk: int, base: LedgerBase) -> Stock:
    """One stock with ``ledger_on_hand``, ``ledger_reserved`` (its base plus its movements after it) and
    ``active_reserved``. The stock is a constant of the statement, so the movements after the base are
    read as a range of the ledger's (stock, id) index (MariaDB reads every entry of each stock's when one
    statement covers several)."""
    after = StockMovement.objects.filter(pk__gt=base.through_movement_id)
    return (
        Stock.objects.select_related("variant")
        .filter(pk=pk)
        .annotate(
            ledger_on_hand=Value(base.on_hand) + _sum_per_stock(after, "on_hand_delta"),
            ledger_reserved=Value(base.reserved) + _sum_per_stock(after, "reserved_delta"),
            active_reserved=_sum_per_stock(
                Reservation.objects.filter(state=Reservation.State.ACTIVE),
                "quantity",
                link="variant",
                outer="variant_id",
            ),
        )
        .get()
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


def ledger_checkpoint_list_unverified(*, summed: dict[int, LedgerBase]) -> list[CheckpointBooks]:
    """The checkpoints whose sums differ from the movements they cover: ``summed`` is ``ledger_bases(full=True)``
    (a checkpoint through another movement is summed again on its own)."""
    wrong = []
    for checkpoint in LedgerCheckpoint.objects.select_related("stock__variant").order_by("stock__variant__sku"):
        through = checkpoint.through_movement_id
        base = summed.get(checkpoint.stock_id)
        if base is None or base.through_movement_id != through:
            sums = sql.ledger_sums_of_stock(stock_id=checkpoint.stock_id, after_id=0, through_id=through)
            base = LedgerBase(through, *sums)
        if (checkpoint.on_hand, checkpoint.reserved) != (base.on_hand, base.reserved):
            wrong.append(
                CheckpointBooks(
                    checkpoint.stock.variant.sku, through, checkpoint.on_hand, checkpoint.reserved, *base[1:]
                )
            )
    return wrong


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
