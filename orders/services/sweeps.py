"""Sweeps over many orders (expired, failed payments), a claimed batch at a time, for Celery beat and commands."""

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum

from core.clock import db_now
from core.db import retry_on_deadlock
from inventory.errors import LockTimeout
from inventory.section import stock_section
from orders.models import Order, OrderLine
from orders.selectors import (
    order_list_final_holding_stock,
    order_list_overdue,
)
from orders.services.lifecycle import Status, order_expire, order_list_expire, order_reservations_settle

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    done: int = 0
    units: int = 0
    skipped: list[str] = field(default_factory=list)  # busy (a payment in flight) or failed: retried later


def order_release_expired(
    *, batch_size: int, dry_run: bool = False, progress=None, one_by_one: bool = False
) -> SweepResult:
    """Expire overdue unpaid orders and release their stock, a claimed batch at a time.

    Several sweepers can run at once: each claims its batch with SELECT ... FOR UPDATE SKIP LOCKED.
    A batch is expired in one short stock section (``order_list_expire``); if one of its SKUs stays
    busy past SWEEP_LOCK_WAIT_SECONDS, its orders go one by one, and a busy one waits for the next run.
    ``one_by_one``: every order so (how the sweep ran before batches; bench/sweep.py compares them).
    ``progress`` is called with the number of orders handled per batch.
    """
    if dry_run:
        overdue = order_list_overdue()
        units = OrderLine.objects.filter(order__in=overdue).aggregate(units=Sum("quantity"))["units"]
        return SweepResult(done=overdue.count(), units=units or 0)
    return _orders_sweep(
        order_list_overdue(),
        action=order_expire,
        batch_action=None if one_by_one else order_list_expire,
        batch_size=batch_size,
        progress=progress,
    )


def order_release_failed_payments(*, batch_size: int, progress=None) -> SweepResult:
    """Release the stock of payment-failed orders that still hold it (their release task never ran)."""
    return _orders_sweep(
        order_list_final_holding_stock().filter(status=Status.PAYMENT_FAILED),
        action=lambda *, order: bool(order_reservations_settle(order=order)),
        batch_size=batch_size,
        progress=progress,
    )


def _orders_sweep(queryset, *, action, batch_size: int, progress, batch_action=None) -> SweepResult:
    """One pass over the orders in id order: a skipped order waits for the next run, even if its lease lapses.
    ``batch_action`` (if any) takes a claimed batch a section at a time; what it cannot take, ``action``
    takes order by order."""
    result = SweepResult()
    last_id = 0
    while True:
        batch, units_of = _orders_claim(queryset.filter(pk__gt=last_id), batch_size=batch_size)
        if not batch:
            return result
        last_id = batch[-1].pk
        done, rest = _orders_sweep_sections(batch, batch_action) if batch_action else (set(), batch)
        rest_ids = {order.pk for order in rest}
        for order in batch:
            units = units_of[order.pk]
            if order.pk in rest_ids:
                outcome = _order_sweep_one(order, action)
            else:
                outcome = "done" if order.pk in done else "noop"
            if outcome == "done":
                result.done += 1
                result.units += units
            elif outcome == "skipped":
                result.skipped.append(order.number)
        if progress:
            progress(len(batch))


def _orders_sweep_sections(batch: list[Order], batch_action) -> tuple[set[int], list[Order]]:
    """``batch_action`` over the batch, SWEEP_SECTION_ORDERS orders at a time (one stock section each, so a
    buyer of their SKUs waits for one short section): the ids it changed, and the orders it could not
    take (a SKU stayed busy, or it failed) to be taken one by one."""
    done = set()
    for start in range(0, len(batch), settings.SWEEP_SECTION_ORDERS):
        part = batch[start : start + settings.SWEEP_SECTION_ORDERS]
        try:
            changed = retry_on_deadlock(
                lambda part=part: batch_action(orders=part, lock_wait=settings.SWEEP_LOCK_WAIT_SECONDS)
            )
        except LockTimeout:
            logger.info("%d order(s) wait for busy SKUs; they go one by one", len(part))
            return done, batch[start:]
        except Exception:
            logger.exception("%d order(s) could not be swept at once; they go one by one", len(part))
            return done, batch[start:]
        done.update(order.pk for order in changed)
    return done, []


def _order_sweep_one(order: Order, action) -> str:
    """Run ``action`` on one order, waiting only briefly for its SKUs; one bad order never stops the batch.

    Returns "done", "noop" (nothing to do: paid meanwhile, say) or "skipped" (retried once the lease lapses).
    """

    def run():
        with stock_section(skus=order.skus, lock_wait=settings.SWEEP_LOCK_WAIT_SECONDS):
            return action(order=order)

    try:
        return "done" if retry_on_deadlock(run) else "noop"
    except LockTimeout:
        logger.info("order %s skipped: its SKUs are busy (a payment in flight?); retried later", order.number)
    except Exception:
        logger.exception("order %s could not be swept; retried later", order.number)
    return "skipped"


def _orders_claim(queryset, *, batch_size: int) -> tuple[list[Order], Counter]:
    """Lease a batch no other sweeper holds; a dead sweeper's lease lapses and its batch is taken over.
    The orders leased, and their units by order id.

    The candidates are read first, without locks, then only they are locked (SKIP LOCKED: another
    sweeper's are passed over): a locking read that walked the overdue orders itself would lock every
    row it passed, and with a drop's abandoned carts that is more row locks than MariaDB's lock memory
    holds. Candidates all taken by others meanwhile: the next ones are tried.
    """
    now = db_now()
    free = queryset.filter(Q(sweep_lease_until__isnull=True) | Q(sweep_lease_until__lt=now)).order_by("pk")

    def claim(after: int) -> tuple[list[int], int | None]:
        candidates = list(free.filter(pk__gt=after).values_list("pk", flat=True)[: 2 * batch_size])
        if not candidates:
            return [], None
        with transaction.atomic():
            ids = list(
                free.filter(pk__in=candidates)
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)[:batch_size]
            )
            lease = now + timedelta(seconds=settings.SWEEP_LEASE_SECONDS)
            # By primary key alone: the rows are locked and filtered already, and ``objects`` would add
            # ``is_deleted = 0``, which MariaDB answers through that index, locking index then row: the
            # opposite order to a status UPDATE, and a deadlock with a buyer expiring one of these.
            Order.all_objects.filter(pk__in=ids).update(sweep_lease_until=lease)
        return ids, candidates[-1]

    after = 0
    while True:
        ids, last = retry_on_deadlock(lambda after=after: claim(after))
        if ids or last is None:
            break
        after = last
    # Only what a sweep reads (numbers to log, SKUs to lock, units to count, a voucher to release), the
    # lines in one read for all: building whole orders, lines and products cost a sweeper more than the
    # database spends expiring them.
    claimed = list(Order.objects.filter(pk__in=ids).only("number", "status", "voucher_code").order_by("pk"))
    skus, units = defaultdict(list), Counter()
    for order_id, sku, quantity in OrderLine.objects.filter(order_id__in=ids).values_list(
        "order_id", "variant__sku", "quantity"
    ):
        skus[order_id].append(sku)
        units[order_id] += quantity
    for order in claimed:
        order.skus = sorted(skus[order.pk])  # ``Order.skus``, read once for the batch
    return claimed, units
