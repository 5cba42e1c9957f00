"""Celery tasks: take ids, load, call a service. Retries back off on busy SKUs and database hiccups."""

import logging

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from core.clock import db_now
from core.metrics import DRIFT_FOUND
from inventory.errors import LockTimeout, LockUnavailable
from inventory.selectors import stock_books
from inventory.services import ledger_checkpoint_list_take
from orders.models import Order
from orders.selectors import (
    order_list_deleted_holding_stock,
    order_list_stuck_holding_stock,
)
from orders.services import order_release_expired, order_release_failed_payments, order_reservations_settle
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


def _logged(name: str, sweep) -> int:
    if sweep.done or sweep.skipped:
        logger.info(
            "%s: %d order(s) released, %d unit(s), %d skipped", name, sweep.done, sweep.units, len(sweep.skipped)
        )
    return sweep.done
