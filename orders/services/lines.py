"""Units by SKU that staff or a buyer ask to move on an order's lines: ship, refund or return them."""

from collections.abc import Callable

from core.errors import DomainError, InvalidInput
from orders.models import OrderLine


def line_quantities_checked(
    lines: dict[str, OrderLine],
    quantities: dict[str, int],
    *,
    left: dict[str, int],
    exceeds: Callable[[list[dict]], DomainError],
) -> dict[str, int]:
    """``quantities`` in line order, once each is a whole number of at least 1 of a SKU of the order
    (``InvalidInput`` names each that is not) and none asks more than is ``left`` of its line
    (``exceeds(over)``, with per SKU the units ``requested`` and those ``left``)."""
    errors = {}
    for sku, quantity in quantities.items():
        if sku not in lines:
            errors[sku] = "Not a line of this order."
        elif isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 1:
            errors[sku] = "Give a whole number of units, at least 1."
    if errors:
        raise InvalidInput(fields=errors)
    over = [
        {"sku": sku, "requested": quantity, "left": left[sku]}
        for sku, quantity in quantities.items()
        if quantity > left[sku]
    ]
    if over:
        raise exceeds(over)
    return {sku: quantities[sku] for sku in lines if sku in quantities}
