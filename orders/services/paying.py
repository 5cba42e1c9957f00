"""Paying an order: a payment started with the provider, then applied or refunded as its webhooks say."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core.clock import db_now
from core.errors import DomainError
from inventory.errors import InsufficientStock
from inventory.section import stock_section
from inventory.services import stock_commit, stock_reserve, stock_restock
from orders.errors import OrderExpired, OrderNotPayable, OrderNotRefundable, PaymentNotApplied
from orders.models import Order, Payment
from orders.payments import payment_provider
from orders.selectors import order_units_held, payment_list_unsettled
from orders.services.lifecycle import Status, _order_reload, _order_transition, order_fail_payment
from orders.services.placing import lines_check_limits
from shop.selectors import product_map_orderable

REFUND_RESTOCK = "refund_restock"  # the ledger reason of units a refund puts back on hand

logger = logging.getLogger(__name__)


def order_pay(*, order: Order, return_url: str) -> Payment:
    """Start paying ``order``: its payment with the provider, recorded before the buyer is sent to pay.

    Paid already, or a payment under way: that payment again, never a second charge. Expired: its
    lines are reserved again first, if it may be revived and stock allows. The provider is called
    outside any lock or transaction, so a slow provider never holds up other buyers. The outcome
    arrives later, by webhook (``payment_event_process``); ``return_url`` is where the provider sends
    the buyer back.
    """
    with stock_section(skus=order.skus):
        order = _order_reload(order)
        if order.status == Status.PAID and (captured := order.payments.filter(state=Payment.State.CAPTURED).last()):
            return captured
        if order.status not in (Status.AWAITING_PAYMENT, Status.EXPIRED):
            raise OrderNotPayable(number=order.number, status=order.status)
        if order.status == Status.EXPIRED:
            _order_reserve_again(order)
        if pending := order.payments.filter(state=Payment.State.PENDING).last():
            return pending  # a second click: the same checkout
        attempt = Payment.all_objects.filter(order=order).count() + 1
    provider, amount = payment_provider(), order.total  # the total sums the lines: read once
    checkout = provider.checkout_start(order=order, attempt=attempt, amount=amount, return_url=return_url)
    try:
        with transaction.atomic():
            return Payment.objects.create(
                order=order,
                provider=provider.name,
                attempt=attempt,
                reference=checkout.reference,
                redirect_url=checkout.redirect_url,
                amount=amount,
            )
    except IntegrityError:
        return Payment.objects.get(order=order, attempt=attempt)  # a concurrent click stored the same checkout


def payment_succeeded(*, payment: Payment, provider_payment: str) -> Payment:
    """The provider took the money: apply it (the order turns paid and its stock is committed), or refund
    it if the order can no longer be paid (failed or cancelled meanwhile, expired with its stock gone,
    or paid by another payment). Delivered twice, it applies once.

    If the commit's outcome goes unheard, the database decides (``payment_settle``), never a guess; if
    it cannot be read, the task retries, and the settle sweep catches a charge that every retry missed.
    """
    Payment.objects.filter(pk=payment.pk, state__in=[Payment.State.PENDING, Payment.State.FAILED]).update(
        state=Payment.State.CHARGED, provider_payment=provider_payment
    )
    payment = Payment.objects.select_related("order").get(pk=payment.pk)
    if payment.state != Payment.State.CHARGED:
        return payment  # applied or refunded already
    try:
        with stock_section(skus=payment.order.skus):
            _, applied = _payment_apply(payment.order, payment)
    except DomainError as refusal:
        logger.warning("payment %s for order %s cannot be applied (%s): refunding it", payment, payment.order, refusal)
        applied = False
    except Exception:
        # The commit may have happened (a connection lost at COMMIT): the database says whether it did.
        logger.warning(
            "payment %s for order %s: outcome unknown; settling it from the database", payment, payment.order
        )
        return payment_settle(payment=payment)  # raises if the database cannot say: the task retries
    if not applied:
        _payment_refund(payment)
    payment.refresh_from_db()
    return payment


def payment_failed(*, payment: Payment) -> Payment:
    """The payment failed: the order turns ``payment_failed`` and the release task gives its stock back.
    A payment that succeeded first stays as it is: the first final outcome decides."""
    if Payment.objects.filter(pk=payment.pk, state=Payment.State.PENDING).update(state=Payment.State.FAILED):
        order_fail_payment(order=payment.order)
    payment.refresh_from_db()
    return payment


def payment_refund_confirmed(*, payment: Payment) -> Payment:
    """The provider says the payment was refunded (ours, or one made in its dashboard): the order is refunded."""
    Payment.objects.filter(pk=payment.pk, state__in=[Payment.State.CAPTURED, Payment.State.REFUNDING]).update(
        state=Payment.State.REFUNDED
    )
    _order_transition(payment.order, from_statuses=[Status.PAID], to=Status.REFUNDED)
    payment.refresh_from_db()
    return payment


def order_refund(*, order: Order, restock: bool, actor=None) -> Order:
    """Refund a paid order in full through its provider; with ``restock`` its units go back on hand
    (ledger reason ``refund_restock``). Refunded already: the same order, nothing more."""
    with stock_section(skus=order.skus):
        order = _order_reload(order)
        if order.status == Status.REFUNDED:
            return order
        if order.status != Status.PAID:
            raise OrderNotRefundable(number=order.number, status=order.status)
        payment = order.payments.filter(state__in=[Payment.State.CAPTURED, Payment.State.REFUNDING]).last()
        if payment is None:  # refunded in the provider's dashboard meanwhile: its webhook is on its way
            raise OrderNotRefundable(number=order.number, status=order.status)
        Payment.objects.filter(pk=payment.pk, state=Payment.State.CAPTURED).update(state=Payment.State.REFUNDING)
    payment_provider().refund(payment=payment)  # idempotent per payment: a retry refunds once
    with stock_section(skus=order.skus):
        order = _order_reload(order)
        Payment.objects.filter(pk=payment.pk, state=Payment.State.REFUNDING).update(state=Payment.State.REFUNDED)
        if _order_transition(order, from_statuses=[Status.PAID], to=Status.REFUNDED) and restock:
            for line in order.lines_with_products():
                stock_restock(sku=line.product.sku, quantity=line.quantity, reason=REFUND_RESTOCK, actor=actor)
    logger.info("order %s refunded (%s)%s", order, payment, ", its units restocked" if restock else "")
    return order


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
    payment_provider().refund(payment=payment)
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
