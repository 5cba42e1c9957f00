"""Reads of shipments and returns."""

from django.db.models import Sum

from fulfilment.models import ReturnLine, ReturnRequest
from orders.models import Order, OrderLine


def return_find(*, pk: int) -> ReturnRequest | None:
    """A return with what its output shows (its order, lines and refund)."""
    return (
        ReturnRequest.objects.filter(pk=pk)
        .select_related("order", "refund")
        .prefetch_related("lines__order_line__variant")
        .first()
    )


def order_units_returnable(order: Order, *, lines: dict[str, OrderLine] | None = None) -> dict[str, int]:
    """Per SKU, the units the buyer may still ask to return: at the customer and not refunded
    (``LineUnits.returnable``), less those open returns ask back already."""
    if lines is None:
        lines = {line.variant.sku: line for line in order.lines.select_related("variant").order_by("pk")}
    open_requests = (
        ReturnLine.objects.filter(return_request__order=order, return_request__state=ReturnRequest.State.REQUESTED)
        .values("order_line")
        .annotate(units=Sum("quantity"))
    )
    asked = {row["order_line"]: row["units"] for row in open_requests}
    return {sku: max(0, line.units.returnable - asked.get(line.pk, 0)) for sku, line in lines.items()}
