"""A payment provider's webhook events: stored once when they arrive, then processed by a task.

The webhook answers as soon as the event is stored (``payment_event_receive``); a Celery task applies it
(``payment_event_process``). Providers deliver late, twice and out of order: a duplicate is stored
once, and each outcome is a conditional change of the payment's state, so the first final outcome of a
payment decides and a later one changes nothing.
"""

import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from payments.models import Payment, PaymentEvent
from payments.providers import EventUnreadable, Outcome, PaymentOutcome, provider_for
from payments.selectors import payment_find_for_outcome
from payments.services.paying import payment_closed, payment_failed, payment_refund_confirmed, payment_succeeded

logger = logging.getLogger(__name__)

# Enqueued by name: orders.tasks imports these services, so they do not import it back.
PROCESS_PAYMENT_EVENT = "orders.tasks.process_payment_event"


def payment_event_receive(*, provider: str, event: dict) -> bool:
    """Store a verified event once and have a task process it after the commit. False for a duplicate.

    A broker that is down is logged; the event waits, stored, for the sweep (``payment_event_list_process``).
    """
    try:
        with transaction.atomic():
            stored = PaymentEvent.objects.create(
                provider=provider, event_id=event["id"], type=event["type"], payload=event
            )
    except IntegrityError:
        logger.info("payment event %s (%s) received again: already stored", event["id"], event["type"])
        return False
    transaction.on_commit(lambda: current_app.send_task(PROCESS_PAYMENT_EVENT, args=[stored.pk]), robust=True)
    return True


def payment_event_process(*, event: PaymentEvent) -> None:
    """Apply an event to its payment, read by the provider that sent it into the shop's ``PaymentOutcome``.

    An event about no payment is acknowledged and ignored. One that names a payment we cannot find yet
    (a refund that overtook its success) is kept for the sweep, which tries it again until it is
    PAYMENT_EVENT_MATCH_SECONDS old. One that cannot be read (``EventUnreadable``), or a refunded amount in
    another currency than the one charged, is logged at ERROR and kept unprocessed for staff, never taken
    as saying nothing: the provider's next refund event tells its total again. A busy or unreachable stock
    lock raises: the task retries.
    """
    if event.processed_at is not None:
        return
    try:
        outcome = provider_for(event.provider).event_outcome(event.payload)
    except EventUnreadable as unreadable:
        _event_keep(event, unreadable)
        return
    if outcome is None:
        logger.debug("payment event %s: type %s ignored", event.event_id, event.type)
    elif (payment := payment_find_for_outcome(provider=event.provider, outcome=outcome)) is None:
        if event.created_at > timezone.now() - timedelta(seconds=settings.PAYMENT_EVENT_MATCH_SECONDS):
            logger.info("payment event %s (%s) names no payment yet: kept for the sweep", event.event_id, event.type)
            PaymentEvent.objects.filter(pk=event.pk).update(updated_at=timezone.now())  # the sweep tries others first
            return
        logger.warning("payment event %s (%s) names no payment of ours: ignored", event.event_id, event.type)
    elif outcome.kind == Outcome.REFUNDED and outcome.refunded is not None and outcome.currency != _charged_in(payment):
        _event_keep(event, f"refunded {outcome.refunded} {outcome.currency} of a charge in {_charged_in(payment)}")
        return
    else:
        _HANDLERS[outcome.kind](payment, outcome)
        logger.info("payment event %s (%s) applied to payment %s", event.event_id, event.type, payment)
    PaymentEvent.objects.filter(pk=event.pk, processed_at=None).update(processed_at=timezone.now())


def _charged_in(payment: Payment) -> str:
    return payment.charged_currency or payment.currency


def _event_keep(event: PaymentEvent, why) -> None:
    """Leave an event the shop cannot apply unprocessed, for staff (the sweep tries it again, others first)."""
    logger.error("payment event %s (%s) not applied: %s; kept unprocessed for staff", event.event_id, event.type, why)
    PaymentEvent.objects.filter(pk=event.pk).update(updated_at=timezone.now())


def payment_event_list_process(*, older_than: timedelta) -> int:
    """Process the events stored longer than ``older_than`` ago and never processed (their task was lost,
    or they named no payment yet), least recently tried first."""
    stale = PaymentEvent.objects.filter(processed_at=None, created_at__lte=timezone.now() - older_than)
    done = 0
    for event in stale.order_by("updated_at", "pk")[:500]:
        try:
            payment_event_process(event=event)
            done += 1
        except Exception:
            logger.exception("payment event %s could not be processed; retried by the next sweep", event.event_id)
            PaymentEvent.objects.filter(pk=event.pk).update(updated_at=timezone.now())  # the others go first
    return done


def _succeeded(payment: Payment, outcome: PaymentOutcome) -> None:
    payment_succeeded(payment=payment, outcome=outcome)


def _failed(payment: Payment, _outcome: PaymentOutcome) -> None:
    payment_failed(payment=payment)


def _closed(payment: Payment, _outcome: PaymentOutcome) -> None:
    payment_closed(payment=payment)


def _refunded(payment: Payment, outcome: PaymentOutcome) -> None:
    payment_refund_confirmed(payment=payment, refunded=outcome.refunded)


_HANDLERS = {
    Outcome.SUCCEEDED: _succeeded,
    Outcome.FAILED: _failed,
    Outcome.CLOSED: _closed,
    Outcome.REFUNDED: _refunded,
}
