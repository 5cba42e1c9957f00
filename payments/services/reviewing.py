"""A charge in ``review`` (the provider took another amount or currency than asked) waits for staff, who
accept it as its order's payment or refund it all (the payments' admin). Its order is not charged again
meanwhile (``order_pay`` refuses with ``PaymentInReview``)."""

import logging

from payments.errors import ChargeNotAcceptable, PaymentNotInReview, RefundFailed
from payments.models import Payment
from payments.providers import provider_for
from payments.services.paying import payment_charged_apply, payment_refund_unapplied

logger = logging.getLogger(__name__)


def payment_review_accept(*, payment: Payment) -> Payment:
    """Staff accept a charge in ``review`` as its order's payment. What it took beyond the order's total is
    refunded first, through its provider (once, under a key of its own); then it is applied as any charge is,
    or refunded in full if its order can no longer be paid. ``ChargeNotAcceptable`` for a charge in another
    currency, of an amount the provider did not say, or holding less than the order's total: refund it."""
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    if payment.state != Payment.State.REVIEW:
        raise PaymentNotInReview(number=payment.order.number, reference=payment.reference, state=payment.state)
    if reason := _charge_unacceptable(payment):
        raise ChargeNotAcceptable(number=payment.order.number, reference=payment.reference, reason=reason)
    if (excess := payment.excess - payment.amount_refunded) > 0:
        try:
            provider_for(payment.provider).refund(
                payment=payment, amount=excess, key=f"refund-excess-{payment.reference}"
            )
        except Exception as exc:
            logger.exception("payment %s: the provider refused to refund its excess %s", payment, excess)
            raise RefundFailed(number=payment.order.number, reason=str(exc)[:200]) from exc
        Payment.objects.filter(pk=payment.pk, amount_refunded__lt=payment.excess).update(amount_refunded=payment.excess)
    if not Payment.objects.filter(pk=payment.pk, state=Payment.State.REVIEW).update(state=Payment.State.CHARGED):
        raise PaymentNotInReview(number=payment.order.number, reference=payment.reference)
    logger.warning("payment %s for order %s: accepted by staff from review", payment, payment.order)
    return payment_charged_apply(Payment.objects.select_related("order").get(pk=payment.pk))


def payment_review_refund(*, payment: Payment) -> Payment:
    """Staff refund a charge in ``review`` in full (what is left of it), through its provider. Its order
    stays unpaid: its buyer may pay again. A provider that fails leaves it ``refunding`` for the settle sweep."""
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    try:
        claimed = payment_refund_unapplied(payment, claim_from=Payment.State.REVIEW)
    except Exception as exc:
        logger.exception("payment %s: the provider did not refund it yet; the settle sweep tries again", payment)
        raise RefundFailed(number=payment.order.number, reason=str(exc)[:200]) from exc
    if not claimed:
        raise PaymentNotInReview(number=payment.order.number, reference=payment.reference, state=payment.state)
    payment.refresh_from_db()
    return payment


def _charge_unacceptable(payment: Payment) -> str:
    """Why a charge in review cannot pay its order as it is (empty if it can)."""
    if payment.charged_currency != payment.currency:
        return f"charged in {payment.charged_currency or 'a currency not said'}, the order is in {payment.currency}"
    if payment.charged_amount is None:
        return "the provider did not say the amount it charged"
    if (held := payment.charged_amount - payment.amount_refunded) < payment.amount:
        return f"it holds {held}, less than the order's total {payment.amount}"
    return ""
