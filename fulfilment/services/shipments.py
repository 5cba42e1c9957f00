"""Shipping a paid order: some of its lines now and the rest later, each shipment with its tracking.

Shipping moves no stock (paying committed it) and so takes no SKU lock. What it guards is the lines:
a shipment never sends more of a line than is left (``LineUnits.shippable``: neither shipped nor refunded
before shipping), also when two staff ship the same order at once or one refunds it meanwhile. The
order's row is locked (``SELECT ... FOR UPDATE``) for the transaction, as refunds and returns lock it, so
they go one after the other, and each line's count moves by a conditional UPDATE on the line's counts
under a CHECK constraint, so a lost row lock still cannot ship a unit twice nor one refunded.
"""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.db.models.lookups import LessThanOrEqual

from core.errors import InvalidInput
from fulfilment.errors import OrderNotShippable, ShipmentExceedsOrder
from fulfilment.models import Shipment, ShipmentLine
from orders.models import SHIPPABLE_STATUSES, Order, OrderLine
from orders.services.lifecycle import order_transition, order_units_shippable
from orders.services.lines import line_quantities_checked

logger = logging.getLogger(__name__)

Status = Order.Status


@dataclass(frozen=True)
class Tracking:
    carrier: str
    number: str = ""
    url: str = ""


def order_ship(*, order: Order, tracking: Tracking, quantities: dict[str, int] | None = None, actor=None) -> Shipment:
    """Ship ``quantities`` (units by SKU; None: everything left) of a paid order with ``tracking``.

    The order turns ``partially_shipped``, or ``shipped`` once nothing is left to ship. Refused, changing
    nothing: an order not paid or shipped in full already (``OrderNotShippable``), a SKU not in the
    order, a quantity that is not a whole number of at least 1 (``InvalidInput``), more than is left
    of a line (``ShipmentExceedsOrder``).
    """
    if not isinstance(tracking.carrier, str) or not tracking.carrier.strip():
        raise InvalidInput(fields={"carrier": "Name the carrier."})
    with transaction.atomic():
        order = Order.all_objects.select_for_update().get(pk=order.pk)
        if order.is_deleted or order.status not in SHIPPABLE_STATUSES:
            raise OrderNotShippable(number=order.number, status=order.status)
        lines = {line.variant.sku: line for line in order.lines.select_related("variant").order_by("pk")}
        wanted = _quantities_checked(lines, quantities)
        for sku, quantity in wanted.items():
            # Guarded as ``shippable`` counts (shipped + refunded not returned <= quantity, the refunds before
            # shipping being those beyond what was shipped); the CHECK (shipped <= quantity) stands behind it.
            # Sums on both sides, never a difference: the counts are unsigned on MariaDB.
            after = F("quantity_shipped") + F("quantity_refunded") + quantity
            guard = LessThanOrEqual(after, F("quantity") + F("quantity_returned"))
            if not OrderLine.objects.filter(guard, pk=lines[sku].pk).update(
                quantity_shipped=F("quantity_shipped") + quantity
            ):
                raise ShipmentExceedsOrder(number=order.number, lines=[{"sku": sku, "requested": quantity}])
        shipment = Shipment.objects.create(
            order=order,
            carrier=tracking.carrier.strip(),
            tracking_number=tracking.number.strip(),
            tracking_url=tracking.url.strip(),
            shipped_by=actor,
        )
        ShipmentLine.objects.bulk_create(
            [
                ShipmentLine(shipment=shipment, order_line=lines[sku], quantity=quantity)
                for sku, quantity in wanted.items()
            ]
        )
        status = Status.PARTIALLY_SHIPPED if order_units_shippable(order) else Status.SHIPPED
        if order.status != status:
            order_transition(order, from_statuses=SHIPPABLE_STATUSES, to=status)
    logger.info(
        "order %s: shipment %s of %s by %s (%s); %s",
        order, shipment.pk, wanted, shipment.carrier, shipment.tracking_number or "no tracking", order.status,
    )  # fmt: skip
    return shipment


def _quantities_checked(lines: dict[str, OrderLine], quantities: dict[str, int] | None) -> dict[str, int]:
    """The units to ship by SKU, in line order: those asked, checked against the lines, or all that is left."""
    left = {sku: line.units.shippable for sku, line in lines.items()}
    if quantities is None:
        wanted = {sku: units for sku, units in left.items() if units > 0}
        if not wanted:
            raise ShipmentExceedsOrder(lines=[])
        return wanted
    if not quantities:
        raise InvalidInput(fields={"": "Ship at least one unit."})
    return line_quantities_checked(lines, quantities, left=left, exceeds=lambda over: ShipmentExceedsOrder(lines=over))
