"""Paying an order: the gateway's charge, recorded, then applied in the order's stock section."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.clock import db_now
from core.errors import DomainError
from inventory.errors import InsufficientStock
from inventory.models import Reservation
from inventory.section import stock_section
from inventory.services import (
    stock_commit,
    stock_release,
    stock_reserve,
)
from orders.errors import (
    OrderExpired,
    OrderNotPayable,
    PaymentDeclined,
    PaymentNotApplied,
)
from orders.models import Order, Payment
from orders.payments import payment_gateway
from orders.selectors import order_units_held, payment_list_unsettled
from orders.services.lifecycle import Status, _order_reload, _order_transition
from orders.services.placing import lines_check_limits
from shop.selectors import product_map_orderable

logger = logging.getLogger(__name__)


def order_pay(*, order: Order, payment_token: str = "") -> Order:
    """Charge the order and commit its reservation. Paid already: the same order. Expired: reserved again if
    stock allows. The gateway is called outside any lock or transaction, so a slow gateway never holds up
    other buyers; whoever changes the status first wins.

    A successful charge is recorded (``Payment``) before it is applied, and the order turns paid in the
    transaction that captures it. A charge that was not applied is refunded; if the commit's outcome
    was never heard, the database decides (``payment_settle``), never a guess.
    """
    with stock_section(skus=order.skus):
        order = _order_reload(order)
        if order.status == Status.PAID:
            return order
        if order.status in (Status.CANCELLED, Status.PAYMENT_FAILED):
            raise OrderNotPayable(number=order.number, status=order.status)
        if order.status == Status.EXPIRED:
            _order_reserve_again(order)

    gateway = payment_gateway()
    charge = gateway.charge(order=order, amount=order.total, token=payment_token)
    if not charge.succeeded:
        with stock_section(skus=order.skus):
            order = _order_reload(order)
            if _order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
                stock_release(order=order, reason=Reservation.ReleaseReason.PAYMENT_FAILED)
        if order.status == Status.PAID:  # a concurrent payment (a double click) won
            return order
        raise PaymentDeclined(number=order.number, message=charge.message)

    payment = _payment_record(order, charge)
    try:
        with stock_section(skus=order.skus):
            order, applied = _payment_apply(order, payment)
    except DomainError:
        _payment_refund(payment)  # rolled back: not applied
        raise
    except Exception:
        # The commit may have happened (a connection lost at COMMIT): the database says whether it did.
        logger.warning("payment %s for order %s: outcome unknown; settling it from the database", payment, order)
        if payment_settle(payment=payment).state != Payment.State.CAPTURED:
            raise
        return _order_reload(order)
    if not applied:  # a concurrent payment (a double click) won
        _payment_refund(payment)
    return order


def _payment_record(order: Order, charge) -> Payment:
    """Record a successful charge before applying it. If even that fails, refund only if the database
    says there is no record (a record left behind is settled by the sweep)."""
    try:
        return Payment.objects.create(order=order, reference=charge.reference, amount=order.total)
    except Exception:
        connection.close_if_unusable_or_obsolete()
        try:
            recorded = Payment.objects.filter(reference=charge.reference).first()
        except Exception:
            logger.error(
                "charge %s for order %s: its record's outcome is unknown; check it by hand", charge.reference, order
            )
            raise
        if recorded is not None:
            return recorded
        payment_gateway().refund(order=order, reference=charge.reference)
        logger.warning("charge %s for order %s refunded: it could not be recorded", charge.reference, order)
        raise


def _payment_apply(order: Order, payment: Payment) -> tuple[Order, bool]:
    """In the order's stock section: mark it paid with ``payment`` and commit its stock. Whether the charge
    was applied (False: another payment won). Raises if the order cannot be paid (the caller refunds)."""
    order = _order_reload(order)
    if order.status == Status.PAID:
        return order, order.payment_reference == payment.reference
    if order.status == Status.EXPIRED:  # the sweeper won while the gateway worked
        _order_reserve_again(order)
    if not Payment.objects.filter(pk=payment.pk, state=Payment.State.CHARGED).update(state=Payment.State.CAPTURED):
        raise PaymentNotApplied(number=order.number)  # a settle sweep refunded it meanwhile
    paid_now = _order_transition(
        order,
        from_statuses=[Status.AWAITING_PAYMENT],
        to=Status.PAID,
        paid_at=timezone.now(),
        payment_reference=payment.reference,
    )
    if not paid_now:
        raise OrderNotPayable(number=order.number, status=order.status)
    stock_commit(order=order)
    return order, True


def _payment_refund(payment: Payment) -> None:
    """Refund a charge that was not applied: claimed for refunding first, so it is refunded once."""
    claimed = Payment.objects.filter(pk=payment.pk, state__in=[Payment.State.CHARGED, Payment.State.REFUNDING])
    if not claimed.update(state=Payment.State.REFUNDING):
        return
    payment_gateway().refund(order=payment.order, reference=payment.reference)
    Payment.objects.filter(pk=payment.pk, state=Payment.State.REFUNDING).update(state=Payment.State.REFUNDED)
    logger.warning("payment %s for order %s refunded: it was not applied", payment.reference, payment.order)


def payment_settle(*, payment: Payment) -> Payment:
    """Bring a charge to an end from what the database holds: captured stays; a charge never applied is
    applied now if its order can still be paid, else refunded; an interrupted refund is finished.

    Used when a payment's commit went unheard, and by the sweep for charges left so. Raises if the
    database cannot be read (the charge waits for the next sweep).
    """
    connection.close_if_unusable_or_obsolete()
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    if payment.state == Payment.State.CHARGED:
        try:
            with stock_section(skus=payment.order.skus):
                _, applied = _payment_apply(payment.order, payment)
        except DomainError:
            applied = False
        if not applied:
            _payment_refund(payment)
    elif payment.state == Payment.State.REFUNDING:
        _payment_refund(payment)
    payment.refresh_from_db()
    return payment


def payment_list_settle(*, older_than: timedelta) -> int:
    """Settle every charge left charged or half-refunded for longer than ``older_than``; how many."""
    settled = 0
    for payment in payment_list_unsettled(older_than=older_than):
        try:
            payment_settle(payment=payment)
            settled += 1
        except Exception:
            logger.exception("payment %s could not be settled; retried by the next sweep", payment.reference)
    return settled


def _order_reserve_again(order: Order) -> None:
    """Reserve an expired order's lines anew, if it may be revived (``_order_check_revivable``) and its
    buyer stays within each product's limit per customer."""
    now = db_now()
    products = product_map_orderable(skus=order.skus, now=now)
    _order_check_revivable(order, products)
    limited = {product.pk for product in products.values() if product.max_per_customer is not None}
    held = order_units_held(buyers={order.buyer}, product_ids=limited)
    lines_check_limits(
        [(line.product.sku, line.quantity) for line in order.lines_with_products()],
        products,
        held=lambda product_id: held.get((order.buyer, product_id), 0),
    )
    expires_at = now + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    if not _order_transition(order, from_statuses=[Status.EXPIRED], to=Status.AWAITING_PAYMENT, expires_at=expires_at):
        raise OrderNotPayable(number=order.number, status=order.status)
    try:
        stock_reserve(order=order, expires_at=expires_at)
    except InsufficientStock as exc:
        raise OrderExpired(number=order.number, shortages=exc.payload["shortages"]) from exc


def _order_check_revivable(order: Order, products: dict) -> None:
    """An expired order is paid as placed only within EXPIRED_ORDER_PAYABLE_SECONDS of its expiry (on the
    database's clock) and while every line's price is unchanged; otherwise ``OrderExpired`` with today's
    prices, and the buyer places a new order at them."""
    lines = order.lines_with_products()
    too_late = db_now() > order.expires_at + timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS)
    if too_late or any(products[line.product.sku].price != line.unit_price for line in lines):
        prices = [{"sku": sku, "price": str(products[sku].price)} for sku in sorted(products)]
        raise OrderExpired(
            "The reservation expired too long ago, or a price changed since; place a new order.",
            number=order.number,
            prices=prices,
        )
