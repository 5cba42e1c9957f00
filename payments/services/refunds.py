"""Refunding a paid order: chosen units of its lines and optionally its shipping, or all that is left.

A refund is claimed before the provider is asked: in one transaction holding the order's row
(``SELECT ... FOR UPDATE``), each line's refunded units and the order's refunded amount move by
guarded UPDATEs under CHECK constraints, so refunds that race never give back a unit twice nor more
than was paid. The provider is asked outside any lock, with a key of its own per refund, so asking
again refunds once. Its answer completes the refund (the units go back on hand if staff asked; the
order turns refunded once all it paid is back), or, refused, gives the claim back. A refund whose
caller stopped midway is finished by the settle sweep.

Every writer here takes the order's row before it writes the payment's: recording a refund takes a
share lock on its payment's row (the refund's key names it), so one order of locks everywhere keeps a
claim and a webhook from deadlocking.

The provider's ``charge.refunded`` webhooks say how much it has refunded in all. That never completes
a refund of ours (the answer to our request does); an amount beyond all of ours was refunded in the
provider's dashboard and is recorded as a refund of its own, of every line left when it is the rest.
"""

import logging
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.db.models.lookups import LessThanOrEqual
from django.utils import timezone

from core.errors import DomainError, InvalidInput
from core.money import money_round
from inventory.section import stock_section
from inventory.services import stock_restock
from orders.errors import OrderNotFound
from orders.models import PAID_STATUSES, Order, OrderLine
from orders.services.lifecycle import order_shipped_if_nothing_left, order_transition
from orders.services.lines import line_quantities_checked
from orders.units import REFUND_RESTOCK
from payments.errors import OrderNotRefundable, RefundExceedsOrder, RefundFailed
from payments.models import Payment, Refund, RefundLine
from payments.providers import provider_for
from vouchers.services import voucher_use_release

logger = logging.getLogger(__name__)

Status = Order.Status


def order_refund(
    *,
    order: Order,
    restock: bool,
    quantities: dict[str, int] | None = None,
    shipping: bool = False,
    actor=None,
    source: str = Refund.Source.STAFF,
) -> Order:
    """Refund ``quantities`` (units by SKU) of a paid order, and its shipping if ``shipping``; None:
    everything left, shipping included (a full refund is the refund of every line). A refund takes a
    line's units not yet shipped first (``orders.units``): with ``restock`` those go back on hand (ledger
    reason ``refund_restock``, naming the order and line); units at the customer never do (a return
    brings them back), so they are refunded and not restocked.

    Refunded in full already, or every unit claimed by refunds still under way: the order as it is.
    Refused, changing nothing: an order not paid (``OrderNotRefundable``), a SKU not in the order or a
    quantity below 1 (``InvalidInput``), more than is left (``RefundExceedsOrder``), a provider that
    says no (``RefundFailed``).
    """
    refund = refund_claim(order, quantities=quantities, shipping=shipping, restock=restock, actor=actor, source=source)
    if refund is not None:
        refund_send(refund)
    return Order.all_objects.get(pk=order.pk)


def refund_send(refund: Refund, *, resume: bool = False) -> None:
    """Ask the provider for a claimed refund, then complete it. Refused: the claim is given back and
    ``RefundFailed`` raised; ``resume`` (the settle sweep): the error propagates and the claim waits
    for the next sweep, since the first request may have gone through."""
    payment = refund.payment
    if refund.amount > 0:
        try:
            provider_for(payment.provider).refund(payment=payment, amount=refund.amount, key=refund.idempotency_key)
        except Exception as exc:
            if resume:
                raise
            _refund_fail(refund)
            logger.exception("order %s: the provider refused refund %s", refund.order, refund.pk)
            raise RefundFailed(number=refund.order.number, reason=str(exc)[:200]) from exc
    try:
        refund_complete(refund)
    except DomainError as busy:
        if not busy.transient:
            raise
        logger.warning(
            "order %s: refund %s sent; completing it waits for the sweep (%s)", refund.order, refund.pk, busy
        )


def refund_complete(refund: Refund) -> bool:
    """The provider refunded it: mark it so, put back on hand the units it restocks (``quantity_restocked``),
    and turn the order shipped once nothing is left to ship, refunded once all it paid is back. Once,
    whoever calls; True if this call completed it."""
    order = refund.order
    with stock_section(skus=order.skus):
        if not Refund.objects.filter(pk=refund.pk, state=Refund.State.REQUESTED).update(state=Refund.State.SUCCEEDED):
            return False
        for line in refund.lines.filter(quantity_restocked__gt=0).select_related("order_line__variant"):
            _units_restock(line.order_line, line.quantity_restocked, actor=refund.requested_by)
        order_shipped_if_nothing_left(Order.all_objects.select_for_update().get(pk=order.pk))
        _payment_counts_ours(order.pk, refund.payment_id)
        _order_refunded_if_paid_back(order.pk, refund.payment_id)
    logger.info(
        "order %s: refund %s of %s done%s",
        order,
        refund.pk,
        refund.amount,
        ", units restocked" if refund.restock else "",
    )
    return True


def refund_list_settle(*, older_than: timedelta) -> int:
    """Finish refunds claimed longer than ``older_than`` ago and never completed (their caller stopped, or
    the stock lock was busy); how many. The provider is asked again with the same key: it refunds once."""
    stale = Refund.objects.filter(state=Refund.State.REQUESTED, updated_at__lt=timezone.now() - older_than)
    done = 0
    for refund in stale.select_related("order", "payment").order_by("pk")[:500]:
        try:
            refund_send(refund, resume=True)
            done += 1
        except Exception:
            logger.exception("refund %s of order %s not finished; retried by the next sweep", refund.pk, refund.order)
    return done


def payment_refunds_record(*, payment: Payment, refunded: Decimal | None) -> None:
    """The provider says ``refunded`` of the payment that paid its order is back so far (None: all of it).

    Recorded on the payment (never more than it charged, never less than it said before). What goes beyond
    every refund of ours was refunded at the provider: it is recorded as a refund of its own
    (``_provider_refunds_book``).
    """
    with stock_section(skus=payment.order.skus):
        order = Order.all_objects.select_for_update().get(pk=payment.order_id)
        payment = Payment.objects.get(pk=payment.pk)
        total = payment.charge if refunded is None else min(refunded, payment.charge)
        Payment.objects.filter(pk=payment.pk, amount_refunded__lt=total).update(amount_refunded=total)
        _provider_refunds_book(order, payment)
        _order_refunded_if_paid_back(order.pk, payment.pk)


def _provider_refunds_book(order: Order, payment: Payment) -> Refund | None:
    """Record what the provider says it refunded of the order's money beyond every refund of ours (done or
    under way) as a refund of its own: of every line left, and the order refunded, when it is the rest.
    The order's row is locked. Also after a refund of ours was refused, so the provider's word stands."""
    order = Order.all_objects.get(pk=order.pk)
    refunded = Payment.objects.get(pk=payment.pk).amount_refunded - payment.excess
    ours = Refund.objects.filter(payment=payment).exclude(state=Refund.State.FAILED).aggregate(sum=Sum("amount"))
    beyond = refunded - (ours["sum"] or 0)
    left = order.total - order.amount_refunded
    if beyond <= 0 or left <= 0:
        return None
    amount = min(beyond, left)
    lines = list(order.lines.select_related("variant").order_by("pk"))
    rest = amount == left
    refund = _claim_locked(
        order,
        payment,
        wanted={
            line.variant.sku: line.quantity_left_to_refund for line in lines if rest and line.quantity_left_to_refund
        },
        lines={line.variant.sku: line for line in lines},
        with_shipping=rest and _shipping_left(order) > 0,
        amount=amount,
        restock=False,
        actor=None,
        source=Refund.Source.PROVIDER,
        state=Refund.State.SUCCEEDED,
    )
    logger.warning(
        "order %s: %s refunded at the provider (refund %s), not by the shop%s",
        order, amount, refund.pk, "; the order is refunded in full" if rest else "",
    )  # fmt: skip
    return refund


def refund_claim(
    order: Order, *, quantities, restock, shipping=False, actor=None, source=Refund.Source.STAFF
) -> Refund | None:
    """Claim a refund (``order_refund`` says of what) in one transaction on the order's row, before the
    provider is asked (``refund_send``); None if nothing is left to claim. Joins a caller's transaction."""
    with transaction.atomic():
        order = Order.all_objects.select_for_update().get(pk=order.pk)
        if order.is_deleted:
            raise OrderNotFound(number=order.number)
        everything = quantities is None
        if order.status == Status.REFUNDED and everything:
            return None
        if order.status not in PAID_STATUSES:
            raise OrderNotRefundable(number=order.number, status=order.status)
        payment = Payment.objects.filter(
            order=order, reference=order.payment_reference, state=Payment.State.CAPTURED
        ).first()
        if payment is None:  # refunded in full at the provider meanwhile: its webhook is on its way
            raise OrderNotRefundable(number=order.number, status=order.status)
        lines = {line.variant.sku: line for line in order.lines.select_related("variant").order_by("pk")}
        wanted = _quantities_checked(lines, quantities, returning=source == Refund.Source.RETURN)
        shipping_left = _shipping_left(order)
        if shipping and not everything and shipping_left == 0 and order.shipping_refunded:
            raise RefundExceedsOrder(number=order.number, lines=[], shipping=True)
        with_shipping = (everything or shipping) and shipping_left > 0
        if not wanted and not with_shipping:
            if everything:
                return None  # every unit is claimed by refunds under way: the order turns refunded when they finish
            raise InvalidInput(fields={"lines": "Refund at least one unit, or the shipping."})
        left = order.total - order.amount_refunded
        amount = sum((_units_amount(order, lines[sku], units) for sku, units in wanted.items()), start=Decimal(0))
        amount = min(amount + (shipping_left if with_shipping else 0), left)
        if everything:
            amount = left  # the rest, to the cent, whatever was rounded or refunded at the provider before
        return _claim_locked(
            order,
            payment,
            wanted=wanted,
            lines=lines,
            with_shipping=with_shipping,
            amount=amount,
            restock=restock,
            actor=actor,
            source=source,
            state=Refund.State.REQUESTED,
        )


def _claim_locked(order, payment, *, wanted, lines, with_shipping, amount, restock, actor, source, state) -> Refund:
    """Move the lines' and the order's refunded counts (and a return's returned units) and record the refund;
    the order's row is locked. Each UPDATE is guarded, with a CHECK behind it: a lost row lock still cannot
    refund twice, nor take back a unit that was not shipped or came back already."""
    returning = source == Refund.Source.RETURN
    restocked = {}
    for sku, units in wanted.items():
        line = lines[sku]
        restocked[sku] = units if returning else line.units.cancels(units) if restock else 0
        # Sums, never a difference: the counts are unsigned on MariaDB, where a negative one is an error.
        guarded = OrderLine.objects.filter(LessThanOrEqual(F("quantity_refunded") + units, F("quantity")), pk=line.pk)
        changes = {"quantity_refunded": F("quantity_refunded") + units}
        if returning:
            guarded = guarded.filter(LessThanOrEqual(F("quantity_returned") + units, F("quantity_shipped")))
            changes["quantity_returned"] = F("quantity_returned") + units
        if not guarded.update(**changes):
            raise RefundExceedsOrder(number=order.number, lines=[{"sku": sku, "requested": units}])
    claimed = Order.all_objects.filter(pk=order.pk, amount_refunded__lte=F("total") - amount)
    if with_shipping:
        claimed = claimed.filter(shipping_refunded=False)
    changes = {"amount_refunded": F("amount_refunded") + amount} | (
        {"shipping_refunded": True} if with_shipping else {}
    )
    if not claimed.update(**changes):
        raise RefundExceedsOrder(number=order.number, lines=[], shipping=with_shipping)
    refund = Refund.objects.create(
        order=order,
        payment=payment,
        state=state,
        source=source,
        amount=amount,
        shipping=_shipping_left(order) if with_shipping else 0,
        restock=restock,
        requested_by=actor,
    )
    RefundLine.objects.bulk_create(
        [
            RefundLine(
                refund=refund,
                order_line=lines[sku],
                quantity=units,
                amount=_units_amount(order, lines[sku], units),
                quantity_restocked=restocked[sku],
            )
            for sku, units in wanted.items()
            if units > 0
        ]
    )
    logger.info("order %s: refund %s of %s claimed (%s, %s)", order, refund.pk, amount, dict(wanted), source)
    return refund


def _refund_fail(refund: Refund) -> None:
    """The provider refused: the refund failed and its claim on the lines and the order is given back. What
    the provider said it refunded meanwhile (its dashboard) and the claim covered is then booked on its own."""
    with stock_section(skus=refund.order.skus):
        Order.all_objects.select_for_update().filter(pk=refund.order_id).first()
        if not Refund.objects.filter(pk=refund.pk, state=Refund.State.REQUESTED).update(state=Refund.State.FAILED):
            return
        returned = refund.source == Refund.Source.RETURN
        for line in refund.lines.all():
            OrderLine.objects.filter(pk=line.order_line_id).update(
                quantity_refunded=F("quantity_refunded") - line.quantity,
                **({"quantity_returned": F("quantity_returned") - line.quantity} if returned else {}),
            )
        given_back = {"amount_refunded": F("amount_refunded") - refund.amount}
        if refund.shipping > 0:
            given_back["shipping_refunded"] = False
        Order.all_objects.filter(pk=refund.order_id).update(**given_back)
        _provider_refunds_book(refund.order, refund.payment)
        _order_refunded_if_paid_back(refund.order_id, refund.payment_id)


def _payment_counts_ours(order_id: int, payment_id: int) -> None:
    """The provider answered a refund of ours: the payment counts every refund of ours done (and the excess
    refunded when its charge was accepted), whether or not the provider's webhook has told it yet."""
    Order.all_objects.select_for_update().filter(pk=order_id).first()  # the order's row before the payment's
    payment = Payment.objects.get(pk=payment_id)
    done = Refund.objects.filter(payment=payment, state=Refund.State.SUCCEEDED).aggregate(sum=Sum("amount"))
    counted = (done["sum"] or 0) + payment.excess
    Payment.objects.filter(pk=payment_id, amount_refunded__lt=counted).update(amount_refunded=counted)


def _order_refunded_if_paid_back(order_id: int, payment_id: int) -> None:
    """Once all the order paid is back and no refund is under way, the order and its payment are refunded
    (and its voucher use given back, if ``VOUCHER_RELEASE_ON_REFUND``). Call in its stock section."""
    order = Order.all_objects.select_for_update().get(pk=order_id)
    if order.amount_refunded < order.total or order.refunds.filter(state=Refund.State.REQUESTED).exists():
        return
    Payment.objects.filter(pk=payment_id).exclude(state=Payment.State.REFUNDED).update(state=Payment.State.REFUNDED)
    if not order_transition(order, from_statuses=PAID_STATUSES, to=Status.REFUNDED):
        return
    if order.voucher_code and settings.VOUCHER_RELEASE_ON_REFUND:
        voucher_use_release(order_id=order.pk, committed=True)
    logger.info("order %s refunded in full", order)


def _units_restock(line: OrderLine, units: int, *, actor) -> None:
    """Put refunded units back on hand. A line that cannot be restocked (its product deleted since) is
    logged for staff and skipped: the money went back, and the refund is recorded regardless."""
    try:
        with transaction.atomic():
            stock_restock(
                sku=line.variant.sku,
                quantity=units,
                reason=REFUND_RESTOCK,
                actor=actor,
                order=line.order,
                order_line=line,
            )
    except DomainError as refusal:
        logger.error(
            "order %s refunded, but %d unit(s) of %s not restocked (%s): restock them by hand",
            line.order_id, units, line.variant.sku, refusal.as_text(),
        )  # fmt: skip


def _units_amount(order: Order, line: OrderLine, units: int) -> Decimal:
    """What ``units`` more of the line paid, after those refunded before: each share is rounded from the
    line's start, so the shares of all its units add up to what it paid, to the cent."""
    paid = line.line_total - line.discount + (0 if order.prices_include_tax else line.tax)

    def share(count: int) -> Decimal:
        return money_round(paid * count / line.quantity, order.currency)

    return share(line.quantity_refunded + units) - share(line.quantity_refunded)


def _shipping_left(order: Order) -> Decimal:
    """What the buyer paid for shipping and has not had back."""
    if order.shipping_refunded:
        return Decimal(0)
    return order.shipping_price + (0 if order.prices_include_tax else order.shipping_tax)


def _quantities_checked(
    lines: dict[str, OrderLine], quantities: dict[str, int] | None, *, returning: bool = False
) -> dict[str, int]:
    """The units to refund by SKU, in line order: those asked, checked against the lines (what is left to
    refund, or for a return what is at the customer and not refunded), or all left."""
    left = {sku: line.units.returnable if returning else line.units.refundable for sku, line in lines.items()}
    if quantities is None:
        return {sku: units for sku, units in left.items() if units > 0}
    return line_quantities_checked(lines, quantities, left=left, exceeds=lambda over: RefundExceedsOrder(lines=over))
