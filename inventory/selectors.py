"""Reads of stock state: what the counters say, what the ledger and the reservations say."""

from dataclasses import dataclass

from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from core.errors import InvalidInput
from inventory.models import Reservation, Stock, StockMovement
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


def stock_books(*, skus=None) -> list[StockBooks]:
    """Per stock: counters beside the ledger sums and the active reservations (one query)."""
    stocks = Stock.objects.select_related("variant").order_by("variant__sku")
    if skus:
        stocks = stocks.filter(variant__sku__in=skus)
    stocks = stocks.annotate(
        ledger_on_hand=_sum_per_stock(StockMovement.objects.all(), "on_hand_delta"),
        ledger_reserved=_sum_per_stock(StockMovement.objects.all(), "reserved_delta"),
        active_reserved=_sum_per_stock(
            Reservation.objects.filter(state=Reservation.State.ACTIVE),
            "quantity",
            link="variant",
            outer="variant_id",
        ),
    )
    return [
        StockBooks(
            sku=stock.variant.sku,
            on_hand=stock.on_hand,
            reserved=stock.reserved,
            ledger_on_hand=stock.ledger_on_hand,
            ledger_reserved=stock.ledger_reserved,
            active_reserved=stock.active_reserved,
        )
        for stock in stocks
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
