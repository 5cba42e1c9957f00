"""Celery tasks: take ids, load, call a service. Retries back off on busy SKUs and database hiccups."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from inventory.errors import LockTimeout, LockUnavailable
from orders.models import Order
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


def _logged(name: str, sweep) -> int:
    if sweep.done or sweep.skipped:
        logger.info(
            "%s: %d order(s) released, %d unit(s), %d skipped", name, sweep.done, sweep.units, len(sweep.skipped)
        )
    return sweep.done
