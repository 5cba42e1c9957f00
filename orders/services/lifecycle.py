"""Order status changes after placement: expiry, failed payment, cancellation, a free order paid, shipped.

Every status change is a conditional UPDATE on the current status (``order_transition``), so a
payment racing an expiry has exactly one winner, and the stock change rides in the same transaction.
"""

import logging

from celery import current_app
from django.db import transaction
from django.utils import timezone

from inventory.models import Reservation
from inventory.section import stock_section
from inventory.services import (
    stock_commit,
    stock_list_release,
    stock_release,
)
from orders.errors import (
    OrderNotCancellable,
    OrderNotFound,
)
from orders.models import OPEN_STATUSES, PAID_STATUSES, Order
from orders.selectors import order_list_overdue
from vouchers.services import voucher_use_commit, voucher_use_release

logger = logging.getLogger(__name__)

Status = Order.Status

# Enqueued by name: orders.tasks imports these services, so they do not import it back, and the task
# that expires a cancelled order's checkouts is the payments app's (``payments.tasks``, under its old name).
RELEASE_ORDER_STOCK = "orders.tasks.release_order_stock"
EXPIRE_ORDER_CHECKOUTS = "orders.tasks.expire_order_checkouts"


def order_transition(order: Order, *, from_statuses, to: str, **fields) -> bool:
    """Move ``order`` to ``to`` only if it is still in one of ``from_statuses``; True if this call won."""
    won = bool(Order.objects.filter(pk=order.pk, status__in=list(from_statuses)).update(status=to, **fields))
    if won:
        order.status = to
        for name, value in fields.items():
            setattr(order, name, value)
    return won


def order_stock_release(*, order: Order, reason: str) -> list[Reservation]:
    """Give back what the order holds: its reserved units and its voucher's reserved use."""
    released = stock_release(order=order, reason=reason)
    if order.voucher_code:
        voucher_use_release(order_id=order.pk)
    return released


def order_stock_commit(*, order: Order) -> list[Reservation]:
    """The order is paid: its reserved units are sold and its voucher's reserved use counts for good."""
    committed = stock_commit(order=order)
    if order.voucher_code:
        voucher_use_commit(order_id=order.pk)
    return committed


def order_reload(order: Order) -> Order:
    """The order as it is now (call under its stock section); a deleted order is gone for customers."""
    current = Order.all_objects.filter(pk=order.pk).first()
    if current is None or current.is_deleted:
        raise OrderNotFound(number=order.number)
    return current


def order_expire(*, order: Order) -> bool:
    """Expire an overdue unpaid order and release its stock. False if it was paid, cancelled, not yet due,
    or a charge for it waits to be applied (``order_charge_waiting``)."""
    return bool(order_list_expire(orders=[order]))


def order_list_expire(*, orders: list[Order], lock_wait: float | None = None) -> list[Order]:
    """Expire those of ``orders`` that are overdue and unpaid, as ``order_expire`` does one, and release
    their stock: in one stock section over all their SKUs, with the same statements however many orders
    (a sweep's batch is one short section, not one per order). The orders expired.

    What is due is read by ``order_list_overdue``'s rule with the rows locked, so a payment or a cancel
    racing the sweep has one winner.
    """
    if not orders:
        return []
    by_pk = {order.pk: order for order in orders}
    skus = sorted({sku for order in orders for sku in order.skus})
    with stock_section(skus=skus, lock_wait=lock_wait):
        due = list(order_list_overdue().filter(pk__in=by_pk).select_for_update().values_list("pk", flat=True))
        if not due:
            return []
        Order.all_objects.filter(pk__in=due).update(status=Status.EXPIRED)
        stock_list_release(order_ids=due, skus=skus, reason=Reservation.ReleaseReason.EXPIRED)
        for pk in due:
            if by_pk[pk].voucher_code:
                voucher_use_release(order_id=pk)
    for pk in due:
        by_pk[pk].status = Status.EXPIRED
    return [by_pk[pk] for pk in due]


def order_fail_payment(*, order: Order) -> bool:
    """Mark an unpaid order's payment failed and enqueue the release of its stock at once.

    No stock lock is needed: the status change is conditional, so it races a payment safely. The
    release runs in a task after commit; the failed-payments sweep catches any that were missed.
    Returns False if the order was no longer awaiting payment.
    """
    with transaction.atomic():
        if not order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
            return False
        # robust: the change has committed; a broker that is down is logged, and the sweep releases instead.
        transaction.on_commit(lambda: current_app.send_task(RELEASE_ORDER_STOCK, args=[order.pk]), robust=True)
    return True


def order_cancel(*, order: Order) -> Order:
    """Cancel an unpaid order and release its stock. Cancelling twice returns the same order."""
    with stock_section(skus=order.skus):
        order = order_reload(order)
        if order.status in PAID_STATUSES:
            raise OrderNotCancellable(number=order.number)
        if order_transition(
            order,
            from_statuses=[*OPEN_STATUSES, Status.EXPIRED, Status.PAYMENT_FAILED],
            to=Status.CANCELLED,
        ):
            order_stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)
            # The provider's checkout stops taking money: a late payment would only be refunded.
            transaction.on_commit(lambda: current_app.send_task(EXPIRE_ORDER_CHECKOUTS, args=[order.pk]), robust=True)
    return order


def order_reservations_settle(*, order: Order) -> list[Reservation]:
    """Bring a final order's leftover active reservations in line with its status (reconcile --fix).

    The status is read again under the order's locks: a declined order paid again meanwhile holds new
    reservations that are not leftovers."""
    with stock_section(skus=order.skus):
        order = Order.all_objects.get(pk=order.pk)
        if order.status in PAID_STATUSES:
            return order_stock_commit(order=order)
        if order.status in (Status.CANCELLED, Status.EXPIRED, Status.PAYMENT_FAILED):
            return order_stock_release(order=order, reason=order.status)
    return []


def order_complete_free(*, order: Order) -> Order:
    """A free order (total 0.00: a 100% voucher with free shipping, a free product) is paid as soon as it is
    placed, without a provider (none can charge nothing): its stock and voucher use are committed, and its
    receipt is emailed, as for any paid order. Any other order, or one paid already, is returned as it is."""
    if order.total != 0 or order.status != Status.AWAITING_PAYMENT:
        return order
    with stock_section(skus=order.skus):
        if not order_paid_free(order):
            order.refresh_from_db(fields=["status", "paid_at"])
    return order


def order_paid_free(order: Order) -> bool:
    """In the order's stock section: pay a free order awaiting payment. True if this call paid it."""
    if not order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAID, paid_at=timezone.now()):
        return False
    order_stock_commit(order=order)
    logger.info("order %s is free: paid without a provider", order)
    return True


def order_units_shippable(order: Order) -> int:
    """Units of the order left to ship, as its lines count them now."""
    return sum(line.units.shippable for line in order.lines.all())


def order_shipped_if_nothing_left(order: Order) -> None:
    """A partially shipped order whose last units left to ship were refunded is shipped: nothing more goes."""
    if order.status == Status.PARTIALLY_SHIPPED and not order_units_shippable(order):
        order_transition(order, from_statuses=[Status.PARTIALLY_SHIPPED], to=Status.SHIPPED)
