"""The rules of one reservation: the one place a rule about the units one request takes of its SKUs goes.

``StockPlan.take`` applies them to each request of every batch that takes stock, in queue order, before
it takes the request's units: an order placed (``orders.services.placing_rules``) and an order's stock
reserved again (``inventory.services.stock_reserve``). A rule raises its ``DomainError``
(``inventory.errors``); the batch runner drops what the request staged and answers it as it would be
answered alone.
"""

from collections import Counter
from typing import NamedTuple

from inventory.errors import InsufficientStock


class Demand(NamedTuple):
    """Units a request asks of one SKU."""

    variant_id: int
    sku: str
    quantity: int


def reservation_check(demands: list[Demand], *, left: Counter | None) -> None:
    """Refuse the units one request asks of each SKU (``demands``) if a rule says no.

    ``left`` is the units free by product before this request, read under the lock, or None on the first
    pass, which reads nothing: every request is assumed covered and the guarded UPDATE decides (a rule
    that needs ``left`` checks only when it is read; the others check on both passes).
    """
    if left is not None:
        short = [
            {"sku": want.sku, "requested": want.quantity, "available": max(left[want.variant_id], 0)}
            for want in demands
            if left[want.variant_id] < want.quantity
        ]
        if short:
            raise InsufficientStock(shortages=short)
