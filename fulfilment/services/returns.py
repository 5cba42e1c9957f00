"""Returns: a buyer asks to send back units of a shipped order; staff accept (refund and restock) or refuse.

Only units at the customer (``LineUnits.returnable``: shipped, neither returned nor refunded) and not
asked back by another open return can be asked for: never a unit that was not shipped. A request is
recorded holding the order's row (``SELECT ... FOR UPDATE``), so two requests never ask back the same
unit. Accepting claims the refund of those units (``source=return``: counted returned, restocked) in the
same transaction that marks the return accepted, checked again against what is at the customer then, so
two staff accepting at once refund it once; the provider is asked after the commit, as for any refund
(``payments.services.refunds``). Each step is emailed.
"""

import logging

from django.db import transaction

from core.errors import InvalidInput
from fulfilment.errors import ReturnAlreadyDecided, ReturnNotAllowed
from fulfilment.models import RETURN_WORDS_MAX_LENGTH, ReturnLine, ReturnRequest
from fulfilment.selectors import order_units_returnable
from orders.errors import OrderNotFound
from orders.models import Order
from orders.services.lines import line_quantities_checked
from payments.errors import RefundFailed
from payments.models import Refund
from payments.services.refunds import refund_claim, refund_send

logger = logging.getLogger(__name__)

State = ReturnRequest.State


def return_request_create(*, order: Order, quantities: dict[str, int], reason: str = "") -> ReturnRequest:
    """Record the buyer's request to return ``quantities`` (units by SKU) of ``order``, with their ``reason``.

    Refused, recording nothing: a SKU not in the order, a quantity below 1 or nothing asked
    (``InvalidInput``), more of a line than is at the customer, not refunded and not asked back
    (``ReturnNotAllowed``, with the units left per SKU).
    """
    if not isinstance(reason, str) or len(reason) > RETURN_WORDS_MAX_LENGTH:
        raise InvalidInput(fields={"reason": f"At most {RETURN_WORDS_MAX_LENGTH} characters."})
    with transaction.atomic():
        order = Order.all_objects.select_for_update().get(pk=order.pk)
        if order.is_deleted:
            raise OrderNotFound(number=order.number)
        lines = {line.variant.sku: line for line in order.lines.select_related("variant").order_by("pk")}
        if not isinstance(quantities, dict) or not quantities:
            raise InvalidInput(fields={"lines": "Choose at least one unit to return."})
        quantities = line_quantities_checked(
            lines,
            quantities,
            left=order_units_returnable(order, lines=lines),
            exceeds=lambda over: ReturnNotAllowed(number=order.number, lines=over),
        )
        created = ReturnRequest.objects.create(order=order, reason=reason.strip())
        ReturnLine.objects.bulk_create(
            [
                ReturnLine(return_request=created, order_line=lines[sku], quantity=units)
                for sku, units in quantities.items()
            ]
        )
    logger.info("order %s: return %s asked for %s", order, created.pk, quantities)
    return created


def return_request_accept(*, return_request: ReturnRequest, actor=None, answer: str = "") -> ReturnRequest:
    """Accept a requested return: its units are refunded and put back on hand. ``ReturnAlreadyDecided``
    if it was accepted or refused already; the refund's own refusals (``RefundExceedsOrder`` when those
    units were refunded meanwhile, ``RefundFailed``) leave it requested."""
    with transaction.atomic():
        locked = ReturnRequest.objects.select_for_update().select_related("order").get(pk=return_request.pk)
        if locked.state != State.REQUESTED:
            raise ReturnAlreadyDecided(number=locked.order.number, state=locked.state)
        lines = locked.lines.select_related("order_line__variant").order_by("pk")
        quantities = {line.order_line.variant.sku: line.quantity for line in lines}
        refund = refund_claim(
            locked.order, quantities=quantities, restock=True, actor=actor, source=Refund.Source.RETURN
        )
        ReturnRequest.objects.filter(pk=locked.pk).update(
            state=State.ACCEPTED, refund=refund, decided_by=actor, answer=answer.strip()
        )
    try:
        refund_send(refund)
    except RefundFailed:
        # The refund's claim was given back: the return waits for staff again.
        ReturnRequest.objects.filter(pk=locked.pk, state=State.ACCEPTED).update(
            state=State.REQUESTED, refund=None, decided_by=None
        )
        raise
    logger.info("order %s: return %s accepted, refund %s", locked.order, locked.pk, refund.pk)
    return ReturnRequest.objects.get(pk=locked.pk)


def return_request_refuse(*, return_request: ReturnRequest, actor=None, answer: str = "") -> ReturnRequest:
    """Refuse a requested return, telling the buyer ``answer``; ``ReturnAlreadyDecided`` if it was decided."""
    if not ReturnRequest.objects.filter(pk=return_request.pk, state=State.REQUESTED).update(
        state=State.REFUSED, decided_by=actor, answer=answer.strip()
    ):
        current = ReturnRequest.objects.select_related("order").get(pk=return_request.pk)
        raise ReturnAlreadyDecided(number=current.order.number, state=current.state)
    logger.info("return %s refused", return_request.pk)
    return ReturnRequest.objects.get(pk=return_request.pk)
