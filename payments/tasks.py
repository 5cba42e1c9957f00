"""Celery tasks of payments: take ids, load, call a service. Retries back off on busy SKUs and database hiccups.

Each keeps the name it had under ``orders.tasks``: beat's schedule and queued messages name tasks, and
during a host-by-host upgrade an old beat or web host still sends those names.
"""

import json
import logging
import urllib.error
import urllib.request
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from core.services import api_token_list_delete_expired, session_list_delete_expired
from orders.services.pruning import order_email_list_prune
from orders.tasks import RETRYABLE
from payments.models import PaymentEvent
from payments.providers.local import local_webhook_secret
from payments.providers.stripe import webhook_sign
from payments.services import (
    payment_event_list_process,
    payment_event_process,
    payment_list_expire_checkouts,
    payment_list_settle,
    refund_list_settle,
)
from payments.services.pruning import payment_event_list_prune

logger = logging.getLogger(__name__)


@shared_task(
    name="orders.tasks.settle_payments", autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3
)
def settle_payments() -> int:
    """Charges a payer left neither applied nor refunded (it died, or lost the database at its commit), and
    refunds claimed but never finished."""
    older_than = timedelta(seconds=settings.PAYMENT_SETTLE_AFTER_SECONDS)
    settled = payment_list_settle(older_than=older_than) + refund_list_settle(older_than=older_than)
    if settled:
        logger.info("payment sweep: %d charge(s) settled", settled)
    return settled


@shared_task(
    name="orders.tasks.process_payment_event",
    autoretry_for=RETRYABLE,
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=8,
)
def process_payment_event(event_id: int) -> None:
    """Apply a stored webhook event to its payment. Run twice (a redelivery, a retry), it applies once."""
    event = PaymentEvent.objects.filter(pk=event_id).first()
    if event is None:
        logger.warning("process_payment_event: no event %s", event_id)
        return
    payment_event_process(event=event)


@shared_task(
    name="orders.tasks.sweep_payment_events",
    autoretry_for=RETRYABLE,
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=3,
)
def sweep_payment_events() -> int:
    """Events stored but never processed (their task was lost with a broker outage)."""
    done = payment_event_list_process(older_than=timedelta(seconds=settings.PAYMENT_EVENT_SWEEP_AFTER_SECONDS))
    if done:
        logger.info("payment event sweep: %d event(s) processed", done)
    return done


@shared_task(
    name="orders.tasks.expire_order_checkouts",
    autoretry_for=RETRYABLE,
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=8,
)
def expire_order_checkouts(order_id: int) -> int:
    """A cancelled order's checkouts stop taking money (the sweep below catches any this misses)."""
    return payment_list_expire_checkouts(order_id=order_id)


@shared_task(
    name="orders.tasks.sweep_unpayable_checkouts",
    autoretry_for=RETRYABLE,
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=3,
)
def sweep_unpayable_checkouts() -> int:
    """Checkouts still open for orders that can no longer be paid: expired with their provider."""
    return payment_list_expire_checkouts()


@shared_task(
    name="orders.tasks.local_webhook_send",
    autoretry_for=(urllib.error.URLError, OSError),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=8,
)
def local_webhook_send(event: dict, url: str) -> int:
    """The local payment provider's webhook: ``event`` signed as Stripe signs it, POSTed to the shop."""
    payload = json.dumps(event).encode()
    request = urllib.request.Request(
        url,
        data=payload,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Stripe-Signature": webhook_sign(payload, secret=local_webhook_secret()),
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


@shared_task(
    name="orders.tasks.prune_history", autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3
)
def prune_history() -> dict:
    """Keep the tables that only grow bounded: expired tokens and sessions, old events and email records."""
    pruned = {
        "api tokens": api_token_list_delete_expired(),
        "sessions": session_list_delete_expired(),
        "payment events": payment_event_list_prune(),
        "order emails": order_email_list_prune(),
    }
    if any(pruned.values()):
        logger.info("pruned %s", ", ".join(f"{count} {name}" for name, count in pruned.items()))
    return pruned
