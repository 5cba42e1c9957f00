"""The rules of placing one order: the one place a rule about a single order goes.

``order_place_one`` sees one order and raises its refusal; ``orders.services.placing_batch`` runs it for
each queued order in queue order and writes what the steps staged together."""

from drops.errors import NotAdmitted
from inventory.batching import Demand
from orders.errors import IdempotencyConflict
from orders.pricing import Destination
from orders.services.limits import order_lines_check_limits
from orders.services.placing_wire import Placed, PlaceRequest
from shop.selectors import (
    variants_orderable,
)


def order_place_one(request: PlaceRequest, batch) -> Placed:
    """The rules of placing one order: what its buyer is told, or its refusal, raised.

    A key used before, or earlier in this batch (a double click), replays that order, unless the
    request differs. Every line must name a product on sale now, keep its buyer within the product's
    limit per customer, and be covered by the stock; its voucher, if it names one, must apply
    (``vouchers.rules``), with the uses staged by the orders before it counted. A new rule for an
    order goes here: raise its ``DomainError``; the batch runner undoes what this order staged (the
    units it took, too), and every order in the batch still gets the answer it would get alone.
    ``batch`` is the ``placing_batch.OrderBatch`` serving it: what the batch read once, and staged.
    """
    earlier = batch.order_with_key(request)
    if earlier is not None:
        if earlier.fingerprint != request.fingerprint:
            raise IdempotencyConflict(number=earlier.number)
        return Placed(earlier.number, earlier.expires_at, replayed=True)
    if not request.hold_seconds and (
        drops := {batch.gated[line.sku] for line in request.lines if line.sku in batch.gated}
    ):
        raise NotAdmitted(drop=min(drops))  # the line alone sells a drop's units: its holds take them
    variants = variants_orderable(batch.variants, skus=[line.sku for line in request.lines], now=batch.now)
    order_lines_check_limits(
        [(line.sku, line.quantity) for line in request.lines],
        variants,
        held=lambda variant_id: batch.units_held(request.buyer, variant_id),
    )
    batch.stock.take([Demand(variants[line.sku].pk, line.sku, line.quantity) for line in request.lines])
    voucher = None
    if request.voucher_code:  # after the stock: a refusal here gives the units taken to the next buyer
        voucher = batch.voucher(
            request, lines=[(variants[line.sku].pk, variants[line.sku].price * line.quantity) for line in request.lines]
        )
    price = batch.price(
        tuple((variants[line.sku], line.quantity) for line in request.lines),
        to=Destination.of(
            shipping_address=request.shipping_address,
            billing_address=request.billing_address,
            method_id=request.shipping_method_id,
        ),
        voucher=voucher,
        ships_later=bool(request.hold_seconds),
    )
    return batch.order_add(request, variants, price, voucher)
