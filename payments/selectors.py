"""Reads of payments: the one in progress, those to settle or expire, the one a provider's event names."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.clock import db_now
from orders.models import PAID_STATUSES, Order
from payments.models import Payment


def payment_list_unsettled(*, older_than: timedelta) -> QuerySet:
    """Charges neither applied nor refunded (their payer died or lost the database) for ``older_than``."""
    return Payment.objects.filter(
        state__in=[Payment.State.CHARGED, Payment.State.REFUNDING], updated_at__lt=timezone.now() - older_than
    ).order_by("pk")[:500]


def payment_find_in_progress(*, order: Order) -> Payment | None:
    """The order's payment that may still pay it: pending (the buyer may still be paying) or charged and
    about to be applied. While there is one, paying again returns it rather than starting another."""
    if order.status != Order.Status.AWAITING_PAYMENT:
        return None
    return order.payments.filter(state__in=[Payment.State.PENDING, Payment.State.CHARGED]).last()


def payment_find_in_review(*, order: Order) -> Payment | None:
    """The order's charge of another amount or currency than asked, waiting for staff: the order is not
    charged again meanwhile (``PaymentInReview``)."""
    return order.payments.filter(state=Payment.State.REVIEW).last()


def payment_find_refunded_late(*, order: Order) -> Payment | None:
    """A payment of the order that succeeded when the order could no longer be paid, and was refunded."""
    if order.status == Order.Status.REFUNDED:
        return None  # the order itself was refunded: said otherwise
    return order.payments.filter(state=Payment.State.REFUNDED).last()


def payment_find_by_reference(*, reference: str, provider: str) -> Payment | None:
    return Payment.objects.select_related("order").filter(reference=reference, provider=provider).first()


def payment_find_for_outcome(*, provider: str, outcome) -> Payment | None:
    """The payment a provider's event is about: by its checkout, else by the metadata we gave the
    provider (order number and attempt), else by the provider's id of the money movement."""
    payments = Payment.objects.select_related("order").filter(provider=provider)
    if outcome.checkout:  # a checkout names its payment: never another payment of the same order
        return payments.filter(reference=outcome.checkout).first()
    if outcome.order_number and outcome.attempt is not None:
        if found := payments.filter(order__number=outcome.order_number, attempt=outcome.attempt).first():
            return found
    if outcome.provider_payment:
        return payments.filter(provider_payment=outcome.provider_payment).first()
    return None


def payment_list_checkouts_unpayable(*, order_id: int | None = None) -> QuerySet[Payment]:
    """Pending payments whose order can no longer be paid: cancelled, failed, paid or refunded, deleted, or
    expired past its payable window (EXPIRED_ORDER_PAYABLE_SECONDS). Oldest first, at most 500."""
    past_window = db_now() - timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS)
    unpayable = (
        Q(
            order__status__in=[
                Order.Status.CANCELLED,
                Order.Status.PAYMENT_FAILED,
                *PAID_STATUSES,
                Order.Status.REFUNDED,
            ]
        )
        | Q(order__status=Order.Status.EXPIRED, order__expires_at__lt=past_window)
        | Q(order__is_deleted=True)
    )
    payments = Payment.objects.filter(unpayable, state=Payment.State.PENDING).select_related("order")
    if order_id is not None:
        payments = payments.filter(order_id=order_id)
    return payments.order_by("pk")[:500]
