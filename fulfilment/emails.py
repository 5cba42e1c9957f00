"""Emails to buyers about their orders, sent by a Celery beat task from the orders' states.

They speak of an order's whole life (placed, paid, shipped, refunded, returned), so they live in the top
app of that life, beside the shipments and returns.

Which email an order is due follows from what it is now (placed, paid, failed, expired, or paid too
late and refunded), and each kind is sent at most once per order (``OrderEmail``, unique per order and
kind); each shipment and each refund is emailed once (``Shipment.emailed_at``, ``Refund.emailed_at``),
and each step of a return (``ReturnRequest.emailed_state``), whose acceptance says what was refunded.
So placing an order, the hot path of a flash sale, enqueues nothing; an email waits at most
``ORDER_EMAIL_SWEEP_SECONDS`` after the commit; and a broker or mail server that is down delays emails
without losing them.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, QuerySet
from django.template.loader import render_to_string
from django.utils import timezone

from core.money import money_format
from fulfilment.models import ReturnRequest, Shipment
from orders.links import order_link
from orders.models import PAID_STATUSES, Order, OrderEmail
from payments.models import Payment, Refund

logger = logging.getLogger(__name__)

Kind = OrderEmail.Kind
SUBJECTS = {
    Kind.PLACED: "Order {number}: your items are reserved",
    Kind.PAID: "Order {number}: paid, thank you",
    Kind.PAYMENT_FAILED: "Order {number}: the payment failed",
    Kind.EXPIRED: "Order {number}: the reservation expired",
    Kind.LATE_PAYMENT_REFUNDED: "Order {number}: your payment came too late and was refunded",
}


def _due(orders: QuerySet[Order], kind: str) -> QuerySet[Order]:
    sent = OrderEmail.objects.filter(order=OuterRef("pk"), kind=kind)
    return orders.filter(~Exists(sent))


def order_email_list_due(*, since: timedelta, limit: int = 500) -> list[tuple[Order, str]]:
    """Orders changed within ``since`` that are due an email they have not been sent, with its kind."""
    recent = Order.objects.filter(updated_at__gte=timezone.now() - since)
    late_refunds = Payment.objects.filter(order=OuterRef("pk"), state=Payment.State.REFUNDED)
    wanted = [
        (recent.filter(status=Order.Status.AWAITING_PAYMENT), Kind.PLACED),
        (recent.filter(status__in=PAID_STATUSES), Kind.PAID),
        (recent.filter(status=Order.Status.PAYMENT_FAILED), Kind.PAYMENT_FAILED),
        (recent.filter(status=Order.Status.EXPIRED), Kind.EXPIRED),
        (recent.exclude(status=Order.Status.REFUNDED).filter(Exists(late_refunds)), Kind.LATE_PAYMENT_REFUNDED),
    ]
    due = []
    for orders, kind in wanted:
        due_now = _due(orders, kind).select_related("customer").prefetch_related("lines__variant").order_by("pk")
        due += [(order, kind) for order in due_now[:limit]]
    return due[:limit]


def order_email_send(*, order: Order, kind: str) -> bool:
    """Send the order's email of ``kind`` unless it was sent; True if this call sent it.

    Claimed first (a row unique per order and kind), so two sweeps send it once; if sending fails the
    claim is dropped and the next sweep tries again.
    """
    recipient = order.email or (order.customer.email if order.customer else "")
    try:
        with transaction.atomic():
            claim = OrderEmail.objects.create(order=order, kind=kind, recipient=recipient)
    except IntegrityError:
        return False
    if not recipient:
        logger.info("order %s has no email address: no %s email", order, kind)
        return False
    context = {
        "order": order,
        "lines": order.lines_with_variants(),
        "link": order_link(order),
        "refunded_payment": order.payments.filter(state=Payment.State.REFUNDED).last(),
    }
    message = EmailMultiAlternatives(
        subject=SUBJECTS[kind].format(number=order.number),
        body=render_to_string(f"orders/email/{kind}.txt", context),
        to=[recipient],
    )
    message.attach_alternative(render_to_string(f"orders/email/{kind}.html", context), "text/html")
    try:
        message.send()
    except Exception:
        OrderEmail.all_objects.filter(pk=claim.pk).hard_delete()
        raise
    logger.info("sent the %s email of order %s", kind, order)
    return True


def _claimed_email_send(*, order: Order, what: str, subject: str, template: str, context: dict, unclaim) -> bool:
    """Send an email claimed already (``what`` names it in the log) to the order's buyer: the order's email,
    else its account's. If sending fails, ``unclaim()`` drops the claim, so the next sweep tries again, and
    the error propagates. False when the buyer left no address."""
    recipient = order.email or (order.customer.email if order.customer else "")
    if not recipient:
        logger.info("order %s has no email address: no email of %s", order, what)
        return False
    message = EmailMultiAlternatives(
        subject=subject, body=render_to_string(f"orders/email/{template}.txt", context), to=[recipient]
    )
    message.attach_alternative(render_to_string(f"orders/email/{template}.html", context), "text/html")
    try:
        message.send()
    except Exception:
        unclaim()
        raise
    logger.info("sent the email of %s of order %s", what, order)
    return True


def _emailed_at_claim(row: Shipment | Refund) -> bool:
    """Claim a row's email (``emailed_at`` set only if unset): True if this call did, so two sweeps send it once."""
    return bool(type(row).objects.filter(pk=row.pk, emailed_at__isnull=True).update(emailed_at=timezone.now()))


def _emailed_at_unclaim(row: Shipment | Refund) -> None:
    type(row).objects.filter(pk=row.pk).update(emailed_at=None)


def shipment_email_send(*, shipment: Shipment) -> bool:
    """Email the buyer a shipment, with its lines and tracking, unless it was; True if this call sent it.
    Claimed first (``emailed_at`` set only if unset), so two sweeps send it once."""
    if not _emailed_at_claim(shipment):
        return False
    order = shipment.order
    last = order.shipments.order_by("-pk").values_list("pk", flat=True).first()
    completes = order.status == Order.Status.SHIPPED and last == shipment.pk  # nothing left after this parcel
    return _claimed_email_send(
        order=order,
        what=f"shipment {shipment.pk}",
        subject=f"Order {order.number}: shipped with {shipment.carrier}",
        template="shipped",
        context={"order": order, "shipment": shipment, "completes": completes, "link": order_link(order)},
        unclaim=lambda: _emailed_at_unclaim(shipment),
    )


def refund_email_send(*, refund: Refund) -> bool:
    """Email the buyer a refund, with its lines and amount, unless it was; True if this call sent it.
    Claimed first (``emailed_at`` set only if unset), so two sweeps send it once."""
    if not _emailed_at_claim(refund):
        return False
    order = refund.order
    last = order.refunds.filter(state=Refund.State.SUCCEEDED).order_by("-pk").values_list("pk", flat=True).first()
    completes = order.status == Order.Status.REFUNDED and last == refund.pk  # the order is refunded in full
    subject = "refunded" if completes else f"{money_format(refund.amount, order.currency)} refunded"
    return _claimed_email_send(
        order=order,
        what=f"refund {refund.pk}",
        subject=f"Order {order.number}: {subject}",
        template="refund",
        context={"order": order, "refund": refund, "completes": completes, "link": order_link(order)},
        unclaim=lambda: _emailed_at_unclaim(refund),
    )


RETURN_SUBJECTS = {
    ReturnRequest.State.REQUESTED: "Order {number}: we have your return request",
    ReturnRequest.State.ACCEPTED: "Order {number}: return accepted, {amount} refunded",
    ReturnRequest.State.REFUSED: "Order {number}: return not accepted",
}


def return_email_send(*, return_request: ReturnRequest) -> bool:
    """Email the buyer the step their return is at (asked, accepted with its refund, or refused), unless
    they were told it; True if this call sent it. Claimed first (``emailed_state`` moved to the state)."""
    state, told = return_request.state, return_request.emailed_state
    if not ReturnRequest.objects.filter(pk=return_request.pk, emailed_state=told).update(emailed_state=state):
        return False
    order = return_request.order
    amount = money_format(return_request.refund.amount, order.currency) if return_request.refund else ""
    return _claimed_email_send(
        order=order,
        what=f"return {return_request.pk} ({state})",
        subject=RETURN_SUBJECTS[state].format(number=order.number, amount=amount),
        template="return",
        context={"order": order, "return_request": return_request, "link": order_link(order)},
        unclaim=lambda: ReturnRequest.objects.filter(pk=return_request.pk, emailed_state=state).update(
            emailed_state=told
        ),
    )


def order_email_list_send() -> int:
    """Send every email that is due; how many were sent. One that fails waits for the next sweep."""
    sent = 0
    since = timezone.now() - timedelta(seconds=settings.ORDER_EMAIL_WINDOW_SECONDS)
    shipments = (
        Shipment.objects.filter(emailed_at__isnull=True, created_at__gte=since)
        .select_related("order__customer")
        .prefetch_related("lines__order_line__variant")
        .order_by("pk")[:500]
    )
    for shipment in shipments:
        try:
            sent += shipment_email_send(shipment=shipment)
        except Exception:
            logger.exception("the email of shipment %s could not be sent; the next sweep tries again", shipment.pk)
    refunds = (
        Refund.objects.filter(state=Refund.State.SUCCEEDED, emailed_at__isnull=True, created_at__gte=since)
        .exclude(source=Refund.Source.RETURN)  # the return's email says it
        .select_related("order__customer")
        .prefetch_related("lines__order_line__variant")
        .order_by("pk")[:500]
    )
    for refund in refunds:
        try:
            sent += refund_email_send(refund=refund)
        except Exception:
            logger.exception("the email of refund %s could not be sent; the next sweep tries again", refund.pk)
    returns = (
        ReturnRequest.objects.exclude(emailed_state=F("state"))
        .exclude(state=ReturnRequest.State.ACCEPTED, refund__state=Refund.State.REQUESTED)  # told once refunded
        .filter(updated_at__gte=since)
        .select_related("order__customer", "refund")
        .prefetch_related("lines__order_line__variant")
        .order_by("pk")[:500]
    )
    for return_request in returns:
        try:
            sent += return_email_send(return_request=return_request)
        except Exception:
            logger.exception("the email of return %s could not be sent; the next sweep tries again", return_request.pk)
    for order, kind in order_email_list_due(since=timedelta(seconds=settings.ORDER_EMAIL_WINDOW_SECONDS)):
        try:
            sent += order_email_send(order=order, kind=kind)
        except Exception:
            logger.exception("the %s email of order %s could not be sent; the next sweep tries again", kind, order)
    return sent
