"""Order lifecycle. Stock moves only through ``inventory.services``, inside its stock section.

Every status change is a conditional UPDATE on the current status (``_order_transition``), so a
payment racing an expiry has exactly one winner, and the stock change rides in the same transaction.
"""

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from inventory.errors import DomainError, InsufficientStock, InvalidInput
from inventory.models import Reservation
from inventory.services import stock_commit, stock_lines_validate, stock_release, stock_reserve, stock_section
from orders.errors import IdempotencyConflict, OrderExpired, OrderNotCancellable, OrderNotPayable, PaymentDeclined
from orders.models import Order, OrderLine
from orders.payments import payment_gateway
from orders.selectors import order_list_overdue
from shop.selectors import product_map_orderable

logger = logging.getLogger(__name__)

Status = Order.Status


def _fingerprint(lines) -> str:
    canonical = json.dumps(sorted((line.sku, line.quantity) for line in lines))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _order_replay(*, customer, email: str, idempotency_key: str, fingerprint: str) -> Order | None:
    """The order an earlier request with this key placed, if any; a different request is a conflict."""
    scope = {"customer": customer} if customer is not None else {"customer__isnull": True, "email": email}
    order = Order.all_objects.filter(idempotency_key=idempotency_key, **scope).first()
    if order is not None and order.request_fingerprint != fingerprint:
        raise IdempotencyConflict(number=order.number)
    return order


def _order_transition(order: Order, *, from_statuses, to: str, **fields) -> bool:
    """Move ``order`` to ``to`` only if it is still in one of ``from_statuses``; True if this call won."""
    won = bool(Order.objects.filter(pk=order.pk, status__in=list(from_statuses)).update(status=to, **fields))
    if won:
        order.status = to
        for name, value in fields.items():
            setattr(order, name, value)
    return won


def order_place(*, customer=None, email: str = "", items, idempotency_key: str) -> Order:
    """Create an order and reserve its stock, all or nothing. A replay of the same key returns the same order."""
    lines = stock_lines_validate(lines=items)
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key.strip()) <= 64:
        raise InvalidInput(fields={"idempotency_key": "Give a key of 1 to 64 characters."})
    replay = {
        "customer": customer,
        "email": email,
        "idempotency_key": idempotency_key.strip(),
        "fingerprint": _fingerprint(lines),
    }
    if existing := _order_replay(**replay):
        return existing
    skus = [line.sku for line in lines]
    try:
        with stock_section(skus=skus):
            # A replay may have committed while we waited for the lock.
            if existing := _order_replay(**replay):
                return existing
            products = product_map_orderable(skus=skus)
            expires_at = timezone.now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
            order = Order.objects.create(
                customer=customer,
                email=email,
                idempotency_key=replay["idempotency_key"],
                request_fingerprint=replay["fingerprint"],
                expires_at=expires_at,
            )
            OrderLine.objects.bulk_create(
                OrderLine(
                    order=order, product=products[line.sku], quantity=line.quantity, unit_price=products[line.sku].price
                )
                for line in lines
            )
            stock_reserve(order=order, expires_at=expires_at)
    except IntegrityError:
        # Only reachable if a lock was lost: the unique key still lets exactly one replay win.
        if existing := _order_replay(**replay):
            return existing
        raise
    return order


def order_pay(*, order: Order, payment_token: str = "") -> Order:
    """Charge and commit the reservation. Paid again: the same order. Expired: re-reserve if stock allows."""
    declined = None
    with stock_section(skus=order.skus):
        order = Order.objects.get(pk=order.pk)
        if order.status == Status.PAID:
            return order
        if order.status in (Status.CANCELLED, Status.PAYMENT_FAILED):
            raise OrderNotPayable(number=order.number, status=order.status)
        if order.status == Status.EXPIRED:
            _order_reserve_again(order)
        gateway = payment_gateway()
        result = gateway.charge(order=order, amount=order.total, token=payment_token)
        if result.succeeded:
            paid = _order_transition(
                order,
                from_statuses=[Status.AWAITING_PAYMENT],
                to=Status.PAID,
                paid_at=timezone.now(),
                payment_reference=result.reference,
            )
            if not paid:
                gateway.refund(order=order, reference=result.reference)
                raise OrderNotPayable(number=order.number, status=order.status)
            stock_commit(order=order)
        else:
            if _order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
                stock_release(order=order, reason=Reservation.ReleaseReason.PAYMENT_FAILED)
            declined = result
    if declined is not None:
        raise PaymentDeclined(number=order.number, message=declined.message)
    return order


def _order_reserve_again(order: Order) -> None:
    expires_at = timezone.now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    if not _order_transition(order, from_statuses=[Status.EXPIRED], to=Status.AWAITING_PAYMENT, expires_at=expires_at):
        raise OrderNotPayable(number=order.number, status=order.status)
    try:
        stock_reserve(order=order, expires_at=expires_at)
    except InsufficientStock as exc:
        raise OrderExpired(number=order.number, shortages=exc.payload["shortages"]) from exc


def order_expire(*, order: Order) -> bool:
    """Expire an overdue unpaid order and release its stock. False if it was paid, cancelled or not yet due."""
    with stock_section(skus=order.skus):
        if not Order.objects.filter(pk=order.pk, status=Status.AWAITING_PAYMENT, expires_at__lte=timezone.now()).update(
            status=Status.EXPIRED
        ):
            return False
        stock_release(order=order, reason=Reservation.ReleaseReason.EXPIRED)
    order.status = Status.EXPIRED
    return True


def order_fail_payment(*, order: Order) -> bool:
    """Mark an unpaid order's payment failed and release its stock. False if it was no longer awaiting payment."""
    with stock_section(skus=order.skus):
        if not _order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
            return False
        stock_release(order=order, reason=Reservation.ReleaseReason.PAYMENT_FAILED)
    return True


def order_cancel(*, order: Order) -> Order:
    """Cancel an unpaid order and release its stock. Cancelling twice returns the same order."""
    with stock_section(skus=order.skus):
        order = Order.objects.get(pk=order.pk)
        if order.status == Status.PAID:
            raise OrderNotCancellable(number=order.number)
        if _order_transition(
            order,
            from_statuses=[Status.AWAITING_PAYMENT, Status.EXPIRED, Status.PAYMENT_FAILED],
            to=Status.CANCELLED,
        ):
            stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)
    return order


@dataclass
class ExpirySweep:
    expired: int = 0
    units_released: int = 0
    skipped: list[str] = field(default_factory=list)


def order_release_expired(*, batch_size: int = 100, dry_run: bool = False, progress=None) -> ExpirySweep:
    """Expire overdue unpaid orders and release their stock, a bounded batch at a time.

    An order whose SKUs are busy (``lock_timeout``) or that fails for any domain reason is skipped and
    logged; it stays overdue for the next sweep. ``progress`` is called with the orders done per batch.
    """
    sweep = ExpirySweep()
    last_id = 0
    while batch := list(order_list_overdue(after_id=last_id).prefetch_related("lines")[:batch_size]):
        last_id = batch[-1].pk
        for order in batch:
            units = sum(line.quantity for line in order.lines.all())
            if dry_run:
                sweep.expired += 1
                sweep.units_released += units
                continue
            try:
                if order_expire(order=order):
                    sweep.expired += 1
                    sweep.units_released += units
            except DomainError as exc:
                logger.warning("expiry of order %s skipped: %s", order.number, exc.code)
                sweep.skipped.append(order.number)
        if progress:
            progress(len(batch))
    return sweep


def order_reservations_settle(*, order: Order) -> list[Reservation]:
    """Bring a final order's leftover active reservations in line with its status (reconcile --fix)."""
    if order.status == Status.PAID:
        return stock_commit(order=order)
    if order.status in (Status.CANCELLED, Status.EXPIRED, Status.PAYMENT_FAILED):
        return stock_release(order=order, reason=order.status)
    return []
