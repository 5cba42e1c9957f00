"""Paying an order: a payment started with the provider, then applied or refunded as its webhooks say.

A charge is refunded only when its order definitely cannot be paid (failed or cancelled, expired with
its stock gone, paid by another payment). A busy or unreachable stock lock, or a database that cannot
answer, is transient: the error propagates, the task retries, and the settle sweep applies what every
retry missed. Refunds of the payment that paid the order are ``payments.services.refunds``'s.
"""

import logging
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from core.errors import DomainError
from inventory.models import Reservation
from inventory.section import stock_section
from orders.errors import OrderNotPayable
from orders.models import PAID_STATUSES, Order
from orders.services.lifecycle import (
    Status,
    order_fail_payment,
    order_paid_free,
    order_reload,
    order_stock_commit,
    order_stock_release,
    order_transition,
)
from orders.services.reviving import order_reserve_again
from payments.errors import PaymentInReview, PaymentNotApplied
from payments.models import Payment
from payments.providers import PaymentOutcome, payment_provider, provider_for
from payments.selectors import payment_find_in_progress, payment_list_checkouts_unpayable, payment_list_unsettled
from payments.services.refunds import payment_refunds_record

logger = logging.getLogger(__name__)


def order_pay(*, order: Order, return_url: str) -> Payment:
    """Start paying ``order``: its payment with the provider, recorded before the buyer is sent to pay.

    Paid already, or a payment under way (pending, or charged and not yet applied): that payment
    again, never a second charge. Expired, or its payment declined: its lines are reserved again
    first, if it may be revived and stock allows. The provider is called outside any lock or
    transaction, so a slow provider never holds up other buyers. The outcome arrives later, by
    webhook (``payment_event_process``); ``return_url`` is where the provider sends the buyer back.
    Refused while a charge of the order waits in ``review`` (``PaymentInReview``: staff decide it first),
    and for a free order, which is paid then and there (``order_complete_free``).
    """
    with stock_section(skus=order.skus):
        order = order_reload(order)
        if order.status in PAID_STATUSES and (
            paid_with := order.payments.filter(reference=order.payment_reference).first()
        ):
            return paid_with
        if order.status not in (Status.AWAITING_PAYMENT, Status.EXPIRED, Status.PAYMENT_FAILED):
            raise OrderNotPayable(number=order.number, status=order.status)
        if order.payments.filter(state=Payment.State.REVIEW).exists():
            raise PaymentInReview(number=order.number)  # staff accept that charge or refund it first
        if order.status == Status.PAYMENT_FAILED:
            # Tried again after a decline: what the release task has not yet given back goes first.
            order_stock_release(order=order, reason=Reservation.ReleaseReason.PAYMENT_FAILED)
        if order.status in (Status.EXPIRED, Status.PAYMENT_FAILED):
            order_reserve_again(order)
        paid_free = order.total == 0 and order_paid_free(order)  # nothing to charge: committed, then said
        if in_progress := payment_find_in_progress(order=order):
            return in_progress  # a second click, or a charge about to apply: the same payment
        attempt = Payment.all_objects.filter(order=order).count() + 1
    if paid_free:
        raise OrderNotPayable("This order is free: it is paid, with nothing to pay.", number=order.number)
    provider, amount, currency = payment_provider(), order.total, order.currency  # as placed, never recomputed
    checkout = provider.checkout_start(
        order=order,
        attempt=attempt,
        amount=amount,
        currency=currency,
        return_url=return_url,
        payable_until=order.expires_at + timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS),
    )
    try:
        with transaction.atomic():
            return Payment.objects.create(
                order=order,
                provider=provider.name,
                attempt=attempt,
                reference=checkout.reference,
                redirect_url=checkout.redirect_url,
                amount=amount,
                currency=currency,
            )
    except IntegrityError:
        return Payment.objects.get(order=order, attempt=attempt)  # a concurrent click stored the same checkout


def payment_succeeded(*, payment: Payment, outcome: PaymentOutcome) -> Payment:
    """The provider took the money: apply it (the order turns paid and its stock is committed), or refund
    it if the order definitely cannot be paid. Delivered twice, it applies once.

    A charge of another amount or currency than the payment asked for is neither applied nor refunded:
    it waits in ``review`` for staff. A busy or unreachable lock raises (the task retries; the settle
    sweep catches a charge every retry missed). If the commit's outcome goes unheard, the database
    decides (``payment_settle``), never a guess.
    """
    charge = {"charged_amount": outcome.amount, "charged_currency": outcome.currency}
    if outcome.amount != payment.amount or outcome.currency != payment.currency:
        if Payment.objects.filter(pk=payment.pk, state__in=[Payment.State.PENDING, Payment.State.FAILED]).update(
            state=Payment.State.REVIEW, provider_payment=outcome.provider_payment, charged_at=Now(), **charge
        ):
            logger.error(
                "payment %s for order %s: charged %s %s, asked %s %s; neither applied nor refunded, left for staff",
                payment, payment.order, outcome.amount, outcome.currency, payment.amount, payment.currency,
            )  # fmt: skip
        return Payment.objects.get(pk=payment.pk)
    Payment.objects.filter(pk=payment.pk, state__in=[Payment.State.PENDING, Payment.State.FAILED]).update(
        state=Payment.State.CHARGED, provider_payment=outcome.provider_payment, charged_at=Now(), **charge
    )
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    if payment.state != Payment.State.CHARGED:
        return payment  # applied, refunded or in review already
    return payment_charged_apply(payment)


def payment_charged_apply(payment: Payment) -> Payment:
    """Apply a charge (``charged``) to its order, or refund it if the order definitely cannot be paid. Also
    for a charge staff accepted from ``review`` (``payments.services.reviewing``)."""
    try:
        with stock_section(skus=payment.order.skus):
            _, applied = _payment_apply(payment.order, payment)
    except DomainError as refusal:
        if refusal.transient:  # a busy or unreachable lock: the task retries, the settle sweep catches up
            logger.warning(
                "payment %s for order %s waits: %s; retried, never refunded", payment, payment.order, refusal
            )
            raise
        logger.warning("payment %s for order %s cannot be applied (%s): refunding it", payment, payment.order, refusal)
        applied = False
    except Exception:
        # The commit may have happened (a connection lost at COMMIT): the database says whether it did.
        logger.warning(
            "payment %s for order %s: outcome unknown; settling it from the database", payment, payment.order
        )
        return payment_settle(payment=payment)  # raises if the database cannot say: the task retries
    if not applied:
        payment_refund_unapplied(payment)
    payment.refresh_from_db()
    return payment


def payment_failed(*, payment: Payment) -> Payment:
    """The payment failed: the order turns ``payment_failed`` and the release task gives its stock back.
    A payment that succeeded first stays as it is: the first final outcome decides."""
    if Payment.objects.filter(pk=payment.pk, state=Payment.State.PENDING).update(state=Payment.State.FAILED):
        order_fail_payment(order=payment.order)
    payment.refresh_from_db()
    return payment


def payment_closed(*, payment: Payment) -> Payment:
    """The payment's checkout closed unpaid (expired): the payment is over, the order is not failed: it
    keeps its reservation until it expires, and its buyer may pay again meanwhile."""
    Payment.objects.filter(pk=payment.pk, state=Payment.State.PENDING).update(state=Payment.State.FAILED)
    payment.refresh_from_db()
    return payment


def payment_refund_confirmed(*, payment: Payment, refunded: Decimal | None = None) -> Payment:
    """The provider says ``refunded`` of the payment went back so far (None: all of it), ours or one made
    in its dashboard. Of a charge never applied: once all of it is refunded the payment is refunded (a
    success that arrives later then changes nothing). Of the one that paid its order: recorded against
    the order's refunds (``payments.services.refunds``)."""
    _payment_refunded(payment, refunded=refunded)
    payment.refresh_from_db()
    return payment


def _payment_apply(order: Order, payment: Payment) -> tuple[Order, bool]:
    """In the order's stock section: mark it paid with ``payment`` and commit its stock. Whether the charge
    was applied (False: another payment won). Raises if the order cannot be paid (the caller refunds)."""
    order = order_reload(order)
    if order.status in PAID_STATUSES:
        return order, order.payment_reference == payment.reference
    if order.status == Status.EXPIRED:  # the sweeper won while the gateway worked
        order_reserve_again(order, paid_at=payment.charged_at)
    if not Payment.objects.filter(pk=payment.pk, state=Payment.State.CHARGED).update(state=Payment.State.CAPTURED):
        raise PaymentNotApplied(number=order.number)  # a settle sweep or a refund refunded it meanwhile
    paid_now = order_transition(
        order,
        from_statuses=[Status.AWAITING_PAYMENT],
        to=Status.PAID,
        paid_at=timezone.now(),
        payment_reference=payment.reference,
    )
    if not paid_now:
        raise OrderNotPayable(number=order.number, status=order.status)
    order_stock_commit(order=order)
    if (told := Payment.objects.get(pk=payment.pk)).amount_refunded > told.excess:
        # The provider told of a refund (its dashboard) before its success: the order books it now.
        payment_refunds_record(payment=told, refunded=told.amount_refunded)
    return order, True


def payment_refund_unapplied(
    payment: Payment, *, resume: bool = False, claim_from: str = Payment.State.CHARGED
) -> bool:
    """Refund a charge never applied, through the provider it was made with: claimed ``claim_from`` ->
    ``refunding`` first, so one caller asks; False if another did. ``resume``: finish a refund whose caller
    stopped midway (the settle sweep); the provider's idempotency key makes a repeated request refund once."""
    states = [Payment.State.REFUNDING] if resume else [claim_from]
    if not Payment.objects.filter(pk=payment.pk, state__in=states).update(state=Payment.State.REFUNDING):
        return False
    provider_for(payment.provider).refund(payment=payment)
    if _payment_refunded(payment, refunded=None):
        logger.warning("payment %s for order %s refunded: it was not applied", payment.reference, payment.order)
    return True


def _payment_refunded(payment: Payment, *, refunded: Decimal | None) -> bool:
    """Record that ``refunded`` of a charge never applied went back (None: all); once all of it has, the
    payment is refunded. True if it is. The payment that paid its order is ``payment_refunds_record``'s."""
    with stock_section(skus=payment.order.skus):  # its order may be paying with it this very moment
        order = Order.all_objects.get(pk=payment.order_id)
        if order.payment_reference == payment.reference:
            payment_refunds_record(payment=payment, refunded=refunded)
            return False
        charge = Payment.objects.get(pk=payment.pk).charge  # what it took, which may differ from what was asked
        total = charge if refunded is None else min(refunded, charge)
        Payment.objects.filter(pk=payment.pk, amount_refunded__lt=total).update(amount_refunded=total)
        if total < charge:
            logger.warning("payment %s for order %s: %s of %s refunded", payment, payment.order, total, charge)
            return False
        Payment.objects.filter(pk=payment.pk).exclude(state=Payment.State.REFUNDED).update(state=Payment.State.REFUNDED)
    return True


def payment_settle(*, payment: Payment, lock_wait: float | None = None) -> Payment:
    """Bring a charge to an end from what the database holds: captured stays; a charge never applied is
    applied now if its order can still be paid, else refunded; an interrupted refund is finished.

    Used when a payment's commit went unheard, and by the sweep for charges left so. Raises if the
    database cannot be read or the stock lock is busy or unreachable (the charge waits for the next try).
    """
    connection.close_if_unusable_or_obsolete()
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    if payment.state == Payment.State.CHARGED:
        try:
            with stock_section(skus=payment.order.skus, lock_wait=lock_wait):
                _, applied = _payment_apply(payment.order, payment)
        except DomainError as refusal:
            if refusal.transient:
                raise
            applied = False
        if not applied:
            payment_refund_unapplied(payment)
    elif payment.state == Payment.State.REFUNDING:
        payment_refund_unapplied(payment, resume=True)
    payment.refresh_from_db()
    return payment


def payment_list_settle(*, older_than: timedelta) -> int:
    """Settle every charge left charged or half-refunded for longer than ``older_than``; how many."""
    settled = 0
    for payment in payment_list_unsettled(older_than=older_than):
        try:
            payment_settle(payment=payment, lock_wait=settings.SWEEP_LOCK_WAIT_SECONDS)
            settled += 1
        except Exception as exc:
            if isinstance(exc, DomainError) and exc.transient:
                logger.warning("payment %s not settled yet (%s); retried by the next sweep", payment.reference, exc)
            else:
                logger.exception("payment %s could not be settled; retried by the next sweep", payment.reference)
    return settled


def payment_list_expire_checkouts(*, order_id: int | None = None) -> int:
    """Expire the providers' checkouts of pending payments whose order can no longer be paid (all such
    orders, or the one ``order_id`` names), so a late buyer is not charged only to be refunded. How many."""
    expired = 0
    for payment in payment_list_checkouts_unpayable(order_id=order_id):
        try:
            if provider_for(payment.provider).checkout_expire(payment=payment):
                payment_closed(payment=payment)  # else its webhook tells: closed, or paid just before
            expired += 1
        except Exception:
            logger.exception("checkout %s could not be expired; retried by the next sweep", payment.reference)
    if expired:
        logger.info("expired %d checkout(s) of orders that can no longer be paid", expired)
    return expired
