"""Celery tasks: take ids, load, call a service. Retries back off on busy SKUs and database hiccups."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from inventory.errors import LockTimeout, LockUnavailable
from inventory.selectors import stock_books
from orders.models import Order
from orders.selectors import order_list_deleted_holding_stock, order_list_stuck_holding_stock
from orders.services import (
    order_release_expired,
    order_release_failed_payments,
    order_reservations_settle,
    payment_list_settle,
)

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
    """Charges a payer left neither applied nor refunded (it died, or lost the database at its commit)."""
    settled = payment_list_settle(older_than=timedelta(seconds=settings.PAYMENT_SETTLE_AFTER_SECONDS))
    if settled:
        logger.info("payment sweep: %d charge(s) settled", settled)
    return settled


@shared_task
def reconcile_stock() -> int:
    """Check the books and shout about any drift; repairs are a person's call (manage.py reconcile --fix)."""
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
    return len(drifted) + len(stuck) + len(hidden)


def _logged(name: str, sweep) -> int:
    if sweep.done or sweep.skipped:
        logger.info(
            "%s: %d order(s) released, %d unit(s), %d skipped", name, sweep.done, sweep.units, len(sweep.skipped)
        )
    return sweep.done
