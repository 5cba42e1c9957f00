"""A payment provider's webhook events: stored once when they arrive, then processed by a task.

The webhook answers as soon as the event is stored (``payment_event_receive``); a Celery task applies it
(``payment_event_process``). Providers deliver late, twice and out of order: a duplicate is stored
once, and each outcome is a conditional change of the payment's state, so the first final outcome of a
payment decides and a later one changes nothing.
"""

import logging
from datetime import timedelta

from celery import current_app
from django.db import IntegrityError, transaction
from django.utils import timezone

from orders.models import Payment, PaymentEvent
from orders.services.paying import payment_failed, payment_refund_confirmed, payment_succeeded

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
    """Apply an event to its payment; unknown types and unknown payments are acknowledged and ignored."""
    if event.processed_at is not None:
        return
    obj = event.payload.get("data", {}).get("object", {})
    handler = _HANDLERS.get(event.type)
    if handler is None:
        logger.debug("payment event %s: type %s ignored", event.event_id, event.type)
    elif (payment := _payment_of(obj)) is None:
        logger.warning("payment event %s (%s) names no payment of ours: ignored", event.event_id, event.type)
    else:
        handler(payment, obj)
        logger.info("payment event %s (%s) applied to payment %s", event.event_id, event.type, payment)
    PaymentEvent.objects.filter(pk=event.pk, processed_at=None).update(processed_at=timezone.now())


def payment_event_list_process(*, older_than: timedelta) -> int:
    """Process the events stored longer than ``older_than`` ago and never processed (their task was lost)."""
    stale = PaymentEvent.objects.filter(processed_at=None, created_at__lte=timezone.now() - older_than).order_by("pk")
    done = 0
    for event in stale[:500]:
        try:
            payment_event_process(event=event)
            done += 1
        except Exception:
            logger.exception("payment event %s could not be processed; retried by the next sweep", event.event_id)
    return done


def _payment_of(obj: dict) -> Payment | None:
    """The payment a provider object is about: a checkout by its id, a charge by its payment intent."""
    if obj.get("object") == "checkout.session" and isinstance(obj.get("id"), str):
        return Payment.objects.select_related("order").filter(reference=obj["id"]).first()
    if obj.get("object") == "charge" and isinstance(obj.get("payment_intent"), str) and obj["payment_intent"]:
        return Payment.objects.select_related("order").filter(provider_payment=obj["payment_intent"]).first()
    return None


def _succeeded(payment: Payment, session: dict) -> None:
    payment_succeeded(payment=payment, provider_payment=str(session.get("payment_intent") or ""))


def _completed(payment: Payment, session: dict) -> None:
    if session.get("payment_status") == "paid":  # else a delayed method: async_payment_* tells the outcome
        _succeeded(payment, session)


def _failed(payment: Payment, _obj: dict) -> None:
    payment_failed(payment=payment)


def _refunded(payment: Payment, _obj: dict) -> None:
    payment_refund_confirmed(payment=payment)


_HANDLERS = {
    "checkout.session.completed": _completed,
    "checkout.session.async_payment_succeeded": _succeeded,
    "checkout.session.async_payment_failed": _failed,
    "checkout.session.expired": _failed,
    "charge.refunded": _refunded,
}
