"""Celery tasks: take ids, load, call a service. Retries back off on busy SKUs and database hiccups."""

import json
import logging
import urllib.error
import urllib.request
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from core.clock import db_now
from core.metrics import DRIFT_FOUND
from core.services import api_token_list_delete_expired, session_list_delete_expired
from inventory.errors import LockTimeout, LockUnavailable
from inventory.selectors import stock_books
from inventory.services import ledger_checkpoint_list_take
from orders.models import Order, PaymentEvent
from orders.payments.local import local_webhook_secret
from orders.payments.stripe import webhook_sign
from orders.selectors import (
    order_list_deleted_holding_stock,
    order_list_stuck_holding_stock,
)
from orders.services import (
    order_release_expired,
    order_release_failed_payments,
    order_reservations_settle,
    payment_event_list_process,
    payment_event_process,
    payment_list_expire_checkouts,
    payment_list_settle,
    refund_list_settle,
)
from orders.services.emails import order_email_list_send
from orders.services.pruning import order_email_list_prune, payment_event_list_prune
from orders.services.reconciling import reconcile_passed, reconcile_since
from vouchers.selectors import voucher_books

logger = logging.getLogger(__name__)

RETRYABLE = (LockTimeout, LockUnavailable, OperationalError)


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=60, retry_jitter=True, max_retries=8)
def release_order_stock(order_id: int) -> int:
    """Give back what a failed, cancelled or expired order still holds. Delivered twice, it releases once."""
    order = Order.all_objects.filter(pk=order_id).first()
    if order is None:
        logger.warning("release_order_stock: no order %s", order_id)
        return 0
    return len(order_reservations_settle(order=order))


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def sweep_expired_orders() -> int:
    return _logged("expiry sweep", order_release_expired(batch_size=settings.SWEEP_BATCH_SIZE))


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def sweep_failed_payments() -> int:
    return _logged("failed-payment sweep", order_release_failed_payments(batch_size=settings.SWEEP_BATCH_SIZE))


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def settle_payments() -> int:
    """Charges a payer left neither applied nor refunded (it died, or lost the database at its commit), and
    refunds claimed but never finished."""
    older_than = timedelta(seconds=settings.PAYMENT_SETTLE_AFTER_SECONDS)
    settled = payment_list_settle(older_than=older_than) + refund_list_settle(older_than=older_than)
    if settled:
        logger.info("payment sweep: %d charge(s) settled", settled)
    return settled


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=60, retry_jitter=True, max_retries=8)
def process_payment_event(event_id: int) -> None:
    """Apply a stored webhook event to its payment. Run twice (a redelivery, a retry), it applies once."""
    event = PaymentEvent.objects.filter(pk=event_id).first()
    if event is None:
        logger.warning("process_payment_event: no event %s", event_id)
        return
    payment_event_process(event=event)


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def sweep_payment_events() -> int:
    """Events stored but never processed (their task was lost with a broker outage)."""
    done = payment_event_list_process(older_than=timedelta(seconds=settings.PAYMENT_EVENT_SWEEP_AFTER_SECONDS))
    if done:
        logger.info("payment event sweep: %d event(s) processed", done)
    return done


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=60, retry_jitter=True, max_retries=8)
def expire_order_checkouts(order_id: int) -> int:
    """A cancelled order's checkouts stop taking money (the sweep below catches any this misses)."""
    return payment_list_expire_checkouts(order_id=order_id)


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def sweep_unpayable_checkouts() -> int:
    """Checkouts still open for orders that can no longer be paid: expired with their provider."""
    return payment_list_expire_checkouts()


@shared_task(
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


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
def send_order_emails() -> int:
    """The emails orders are due (placed, paid, failed, expired, refunded), each sent once."""
    sent = order_email_list_send()
    if sent:
        logger.info("order emails: %d sent", sent)
    return sent


@shared_task
def reconcile_stock() -> int:
    """Move the ledger checkpoints forward, then check the books from them, and the vouchers changed since
    their last clean check (``reconcile_since``), and shout about any drift; repairs are a person's call
    (manage.py reconcile --fix)."""
    ledger_checkpoint_list_take()
    drifted = [row for row in stock_books() if row.drifted]
    for row in drifted:
        logger.error("STOCK DRIFT %s", row.describe())
    stuck = list(order_list_stuck_holding_stock().values_list("number", flat=True))
    if stuck:
        logger.error("STOCK DRIFT: %d final order(s) still hold stock: %s", len(stuck), ", ".join(stuck[:20]))
    hidden = [
        f"{number} ({status})" for number, status in order_list_deleted_holding_stock().values_list("number", "status")
    ]
    if hidden:
        logger.error(
            "STOCK DRIFT: %d deleted order(s) still hold stock, which no sweep releases: %s",
            len(hidden),
            ", ".join(hidden[:20]),
        )
    started = db_now()
    vouchers = [row for row in voucher_books(since=reconcile_since(check="vouchers")) if row.drifted]
    for row in vouchers:
        logger.error("VOUCHER DRIFT %s", row.describe())
    if not vouchers:
        reconcile_passed(check="vouchers", started=started)
    found = len(drifted) + len(stuck) + len(hidden) + len(vouchers)
    DRIFT_FOUND.inc(found)
    return found


@shared_task(autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3)
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


def _logged(name: str, sweep) -> int:
    if sweep.done or sweep.skipped:
        logger.info(
            "%s: %d order(s) released, %d unit(s), %d skipped", name, sweep.done, sweep.units, len(sweep.skipped)
        )
    return sweep.done
