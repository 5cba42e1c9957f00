"""Order lifecycle. Stock moves only through ``inventory.services``, inside its stock section.

Every status change is a conditional UPDATE on the current status (``_order_transition``), so a
payment racing an expiry has exactly one winner, and the stock change rides in the same transaction.
"""

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec
from celery import current_app
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Sum
from django.db.models.functions import Now
from django.utils import timezone

from core.clock import db_now
from core.db import bulk_insert, from_row, is_duplicate_key, retry_on_deadlock, select_in
from core.errors import DomainError, InvalidInput
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from inventory.models import Reservation
from inventory.services import (
    SERVED_EARLIER,
    Demand,
    LineToReserve,
    StockLine,
    stock_allocate,
    stock_commit,
    stock_lines_validate,
    stock_release,
    stock_reservations_create,
    stock_reserve,
    stock_section,
    stock_section_combined,
)
from orders.errors import (
    IdempotencyConflict,
    OrderExpired,
    OrderNotCancellable,
    OrderNotFound,
    OrderNotPayable,
    PaymentDeclined,
    PaymentNotApplied,
)
from orders.models import Order, OrderLine, Payment, new_order_number
from orders.payments import payment_gateway
from orders.selectors import (
    order_list_final_holding_stock,
    order_list_overdue,
    order_list_overdue_holding,
    payment_list_unsettled,
)
from shop.selectors import product_map_orderable

logger = logging.getLogger(__name__)

Status = Order.Status

# How many overdue orders a new order may expire while it holds the locks.
OVERDUE_EXPIRY_LIMIT = 50
# A batch can fail on another buyer's duplicate key after a lost lock; the buyer then tries on its own.
PLACE_ATTEMPTS = 3
# Enqueued by name: orders.tasks imports this module, so this module does not import it back.
RELEASE_ORDER_STOCK = "orders.tasks.release_order_stock"


def _fingerprint(lines) -> str:
    canonical = json.dumps(sorted((line.sku, line.quantity) for line in lines))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _idempotency_scope(*, customer, email) -> tuple[str, str]:
    """Whose idempotency keys these are, and the normalised email. Guests need a valid email."""
    if email in (None, "") and customer is not None:
        return f"user:{customer.pk}", ""
    if not isinstance(email, str):
        raise InvalidInput(fields={"email": "Give an email address."})
    email = email.strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(fields={"email": "Give a valid email address."}) from None
    if len(email) > 254:
        raise InvalidInput(fields={"email": "At most 254 characters."})
    return (f"user:{customer.pk}" if customer is not None else f"email:{email}"), email


def _key_hash(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def _order_replay(*, scope: str, idempotency_key: str, fingerprint: str) -> Order | None:
    """The order an earlier request with this key placed, if any; a different request is a conflict."""
    order = Order.all_objects.filter(idempotency_scope=scope, idempotency_key_hash=_key_hash(idempotency_key)).first()
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


@dataclass(frozen=True)
class _PlaceRequest:
    """An order to place, as it queues for a hot SKU's lock holder (``inventory.wire`` encodes it)."""

    customer_id: int | None
    email: str
    scope: str
    idempotency_key: str
    key_hash: str  # hashed by the buyer, not by the lock holder serving a batch
    fingerprint: str
    lines: tuple[StockLine, ...]


class _Placed(msgspec.Struct, frozen=True, array_like=True):
    """What a batch tells a buyer of its order: only what the buyer cannot know from its own request.

    ``replayed``: an order placed before with the same key, which the buyer loads as it is now.
    """

    id: int
    number: str
    created_at: datetime
    expires_at: datetime
    replayed: bool = False


def order_place(*, customer=None, email: str = "", items, idempotency_key: str) -> Order:
    """Create an order and reserve its stock, all or nothing. A replay of the same key returns the same order.

    Orders for one SKU queue with its lock and are placed in batches, one commit per batch
    (``stock_section_combined``): that is what keeps a flash sale on one SKU fast.
    """
    lines = stock_lines_validate(lines=items)
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key.strip()) <= 64:
        raise InvalidInput(fields={"idempotency_key": "Give a key of 1 to 64 characters."})
    scope, email = _idempotency_scope(customer=customer, email=email)
    request = _PlaceRequest(
        customer_id=customer.pk if customer is not None else None,
        email=email,
        scope=scope,
        idempotency_key=idempotency_key.strip(),
        key_hash=_key_hash(idempotency_key.strip()),
        fingerprint=_fingerprint(lines),
        lines=tuple(lines),
    )
    for attempt in range(1, PLACE_ATTEMPTS + 1):
        try:
            # A deadlock victim (say, with a sweeper) was rolled back whole: nothing happened, try again.
            outcome = retry_on_deadlock(
                lambda: stock_section_combined(
                    skus=[line.sku for line in lines],
                    kind="place",
                    request=request,
                    result_type=_Placed,
                    execute=_orders_place_batch,
                )
            )
            break
        except (IntegrityError, LockTimeout, LockUnavailable, InsufficientStock) as exc:
            # After a lost lock (Redis restarted, a holder stalled past its TTL) a stale holder may have
            # placed this very key meanwhile: then the unique key refused our copy (IntegrityError), or
            # its units are why we were refused. A holder that took our request and never answered
            # leaves us a LockTimeout whose outcome is unknown. If the order was placed after all, this
            # is a replay. A batch that failed on another buyer's key is tried again.
            try:
                if existing := _order_replay(
                    scope=scope, idempotency_key=request.idempotency_key, fingerprint=request.fingerprint
                ):
                    return existing
            except IdempotencyConflict:
                # The key now names another order (a request after ours in the same batch, say): ours
                # was not placed, and a shortage is the answer it had.
                if isinstance(exc, InsufficientStock):
                    raise exc from None
                raise
            if not is_duplicate_key(exc) or attempt == PLACE_ATTEMPTS:
                raise
            logger.warning("order placement hit a duplicate key (a lost lock?); trying again: %s", exc)
    if outcome.replayed:
        return Order.all_objects.get(pk=outcome.id)
    row = _order_row(request, number=outcome.number, expires_at=outcome.expires_at)
    return from_row(
        Order,
        row
        | {"id": outcome.id, "created_at": outcome.created_at, "updated_at": outcome.created_at}
        | {"is_deleted": False, "deleted_at": None},
    )


def _orders_place_batch(requests: list[_PlaceRequest]) -> list:
    """Place every request the stock can serve, in queue order, inside the stock section: one commit for all.

    Each request gets the answer it would get alone, in queue order. A key placed before the batch is
    a replay; a key repeated in the batch (a double click) is a replay of its first placement there, or
    tried anew if that was refused. A shortage first expires overdue orders holding these SKUs (a late
    sweeper must not cost a sale), before any unit is reserved, so the queue order still decides who
    gets the freed units; those expiries are kept even if an order is still refused.
    """
    results: list = [None] * len(requests)
    earlier = _orders_by_key(requests)
    new = []
    for index, request in enumerate(requests):
        if (key := (request.scope, request.key_hash)) in earlier:
            results[index] = _replay_result(earlier[key], request)
        else:
            new.append(index)
    skus = sorted({line.sku for index in new for line in requests[index].lines})
    try:
        products = product_map_orderable(skus=skus) if skus else {}
    except DomainError as refusal:
        for index in new:
            results[index] = refusal
        new = []

    demands = [
        [Demand(products[line.sku].pk, line.sku, line.quantity) for line in requests[index].lines] for index in new
    ]
    keys = [(requests[index].scope, requests[index].key_hash) for index in new]
    outcomes = (
        stock_allocate(demands=demands, free_more=lambda: _orders_expire_overdue_holding(skus=skus), once_per=keys)
        if new
        else []
    )
    placing = []
    for index, outcome in zip(new, outcomes, strict=True):
        if outcome is SERVED_EARLIER:
            continue
        if outcome:
            results[index] = InsufficientStock(shortages=outcome)
        else:
            placing.append(index)
    placed_with_key = {}
    if placing:
        for index, row in zip(placing, _orders_create(requests, placing, products), strict=True):
            results[index] = _Placed(row["id"], row["number"], row["created_at"], row["expires_at"])
            placed_with_key[(requests[index].scope, requests[index].key_hash)] = index
    for index, outcome in zip(new, outcomes, strict=True):
        if outcome is SERVED_EARLIER:  # the same key placed earlier in this batch (a double click)
            first = placed_with_key[(requests[index].scope, requests[index].key_hash)]
            if requests[first].fingerprint != requests[index].fingerprint:
                results[index] = IdempotencyConflict(number=results[first].number)
            else:
                results[index] = msgspec.structs.replace(results[first], replayed=True)
    return results


def _orders_by_key(requests: list[_PlaceRequest]) -> dict[tuple[str, str], Order]:
    """Orders already placed with these requests' idempotency keys.

    The check is plain SQL: a lock holder runs it once per batch, and a batch of new orders finds
    none, so building the query with the ORM was most of its cost (471 against 87 us of CPU). Only
    replays, which are rare, are loaded with the ORM.
    """
    # Both columns, so the (scope, hash) unique index answers it rather than a scan of every order.
    ids = [
        pk
        for (pk,) in select_in(
            Order,
            "id",
            idempotency_scope=sorted({r.scope for r in requests}),
            idempotency_key_hash=sorted({r.key_hash for r in requests}),
        )
    ]
    if not ids:
        return {}
    return {
        (order.idempotency_scope, order.idempotency_key_hash): order for order in Order.all_objects.filter(pk__in=ids)
    }


def _replay_result(order: Order, request: _PlaceRequest):
    if order.request_fingerprint != request.fingerprint:
        return IdempotencyConflict(number=order.number)
    return _Placed(order.pk, order.number, order.created_at, order.expires_at, replayed=True)


def _order_row(request: _PlaceRequest, *, number: str, expires_at: datetime) -> dict:
    """The order row a request makes: the holder inserts it, and the buyer rebuilds it from ``_Placed``."""
    return {
        "number": number,
        "customer_id": request.customer_id,
        "email": request.email,
        "status": Status.AWAITING_PAYMENT.value,
        "expires_at": expires_at,
        "idempotency_key": request.idempotency_key,
        "idempotency_key_hash": request.key_hash,
        "idempotency_scope": request.scope,
        "request_fingerprint": request.fingerprint,
        "payment_reference": "",
        "paid_at": None,
        "sweep_lease_until": None,
    }


def _orders_create(requests, placing, products) -> list[dict]:
    """Orders, lines, reservations and ledger rows for the served requests: four INSERTs in three round trips."""
    expires_at = db_now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    orders = bulk_insert(
        Order, [_order_row(requests[index], number=new_order_number(), expires_at=expires_at) for index in placing]
    )
    wanted = [(order, line) for order, index in zip(orders, placing, strict=True) for line in requests[index].lines]
    lines = bulk_insert(
        OrderLine,
        [
            {
                "order_id": order["id"],
                "product_id": products[line.sku].pk,
                "quantity": line.quantity,
                "unit_price": products[line.sku].price,
            }
            for order, line in wanted
        ],
    )
    stock_reservations_create(
        lines=[
            LineToReserve(line["id"], line["order_id"], line["product_id"], line["quantity"], expires_at)
            for line in lines
        ],
    )
    return orders


def _orders_expire_overdue_holding(*, skus) -> int:
    """Expire overdue orders that hold these SKUs, if we hold the locks of all their SKUs; return how many.

    Orders that also hold other SKUs are left to the sweeper: taking more locks now could deadlock.
    """
    held = set(skus)
    expired = 0
    for order in order_list_overdue_holding(skus=skus).prefetch_related("lines__product")[:OVERDUE_EXPIRY_LIMIT]:
        if {line.product.sku for line in order.lines.all()} <= held and order_expire(order=order):
            expired += 1
    if expired:
        logger.info("expired %d overdue order(s) holding %s to serve a new order", expired, sorted(held))
    return expired


def _order_reload(order: Order) -> Order:
    """The order as it is now (call under its stock section); a deleted order is gone for customers."""
    current = Order.all_objects.filter(pk=order.pk).first()
    if current is None or current.is_deleted:
        raise OrderNotFound(number=order.number)
    return current


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
    """Reserve an expired order's lines anew (its products must still be for sale)."""
    product_map_orderable(skus=order.skus)
    expires_at = db_now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    if not _order_transition(order, from_statuses=[Status.EXPIRED], to=Status.AWAITING_PAYMENT, expires_at=expires_at):
        raise OrderNotPayable(number=order.number, status=order.status)
    try:
        stock_reserve(order=order, expires_at=expires_at)
    except InsufficientStock as exc:
        raise OrderExpired(number=order.number, shortages=exc.payload["shortages"]) from exc


def order_expire(*, order: Order) -> bool:
    """Expire an overdue unpaid order and release its stock. False if it was paid, cancelled or not yet due."""
    with stock_section(skus=order.skus):
        if not Order.objects.filter(pk=order.pk, status=Status.AWAITING_PAYMENT, expires_at__lte=Now()).update(
            status=Status.EXPIRED
        ):
            return False
        stock_release(order=order, reason=Reservation.ReleaseReason.EXPIRED)
    order.status = Status.EXPIRED
    return True


def order_fail_payment(*, order: Order) -> bool:
    """Mark an unpaid order's payment failed and enqueue the release of its stock at once.

    No stock lock is needed: the status change is conditional, so it races a payment safely. The
    release runs in a task after commit; the failed-payments sweep catches any that were missed.
    Returns False if the order was no longer awaiting payment.
    """
    with transaction.atomic():
        if not _order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
            return False
        # robust: the change has committed; a broker that is down is logged, and the sweep releases instead.
        transaction.on_commit(lambda: current_app.send_task(RELEASE_ORDER_STOCK, args=[order.pk]), robust=True)
    return True


def order_cancel(*, order: Order) -> Order:
    """Cancel an unpaid order and release its stock. Cancelling twice returns the same order."""
    with stock_section(skus=order.skus):
        order = _order_reload(order)
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
class SweepResult:
    done: int = 0
    units: int = 0
    skipped: list[str] = field(default_factory=list)  # busy (a payment in flight) or failed: retried later


def order_release_expired(*, batch_size: int, dry_run: bool = False, progress=None) -> SweepResult:
    """Expire overdue unpaid orders and release their stock, a claimed batch at a time.

    Several sweepers can run at once: each claims its batch with SELECT ... FOR UPDATE SKIP LOCKED.
    ``progress`` is called with the number of orders handled per batch.
    """
    if dry_run:
        overdue = order_list_overdue()
        units = OrderLine.objects.filter(order__in=overdue).aggregate(units=Sum("quantity"))["units"]
        return SweepResult(done=overdue.count(), units=units or 0)
    return _orders_sweep(order_list_overdue(), action=order_expire, batch_size=batch_size, progress=progress)


def order_release_failed_payments(*, batch_size: int, progress=None) -> SweepResult:
    """Release the stock of payment-failed orders that still hold it (their release task never ran)."""
    return _orders_sweep(
        order_list_final_holding_stock().filter(status=Status.PAYMENT_FAILED),
        action=lambda *, order: bool(order_reservations_settle(order=order)),
        batch_size=batch_size,
        progress=progress,
    )


def _orders_sweep(queryset, *, action, batch_size: int, progress) -> SweepResult:
    """One pass over the orders in id order: a skipped order waits for the next run, even if its lease lapses."""
    result = SweepResult()
    last_id = 0
    while batch := _orders_claim(queryset.filter(pk__gt=last_id), batch_size=batch_size):
        last_id = batch[-1].pk
        for order in batch:
            units = sum(line.quantity for line in order.lines.all())
            outcome = _order_sweep_one(order, action)
            if outcome == "done":
                result.done += 1
                result.units += units
            elif outcome == "skipped":
                result.skipped.append(order.number)
        if progress:
            progress(len(batch))
    return result


def _order_sweep_one(order: Order, action) -> str:
    """Run ``action`` on one order, waiting only briefly for its SKUs; one bad order never stops the batch.

    Returns "done", "noop" (nothing to do: paid meanwhile, say) or "skipped" (retried once the lease lapses).
    """

    def run():
        skus = [line.product.sku for line in order.lines.all()]
        with stock_section(skus=skus, lock_wait=settings.SWEEP_LOCK_WAIT_SECONDS):
            return action(order=order)

    try:
        return "done" if retry_on_deadlock(run) else "noop"
    except LockTimeout:
        logger.info("order %s skipped: its SKUs are busy (a payment in flight?); retried later", order.number)
    except Exception:
        logger.exception("order %s could not be swept; retried later", order.number)
    return "skipped"


def _orders_claim(queryset, *, batch_size: int) -> list[Order]:
    """Lease a batch no other sweeper holds; a dead sweeper's lease lapses and its batch is taken over."""
    now = db_now()

    def claim() -> list[int]:
        with transaction.atomic():
            ids = list(
                queryset.filter(Q(sweep_lease_until__isnull=True) | Q(sweep_lease_until__lt=now))
                .order_by("pk")
                .select_for_update(skip_locked=True)
                .values_list("pk", flat=True)[:batch_size]
            )
            lease = now + timedelta(seconds=settings.SWEEP_LEASE_SECONDS)
            # By primary key alone: the rows are locked and filtered already, and ``objects`` would add
            # ``is_deleted = 0``, which MariaDB answers through that index, locking index then row: the
            # opposite order to a status UPDATE, and a deadlock with a buyer expiring one of these.
            Order.all_objects.filter(pk__in=ids).update(sweep_lease_until=lease)
            return ids

    ids = retry_on_deadlock(claim)
    return list(Order.objects.filter(pk__in=ids).order_by("pk").prefetch_related("lines__product"))


def order_reservations_settle(*, order: Order) -> list[Reservation]:
    """Bring a final order's leftover active reservations in line with its status (reconcile --fix)."""
    if order.status == Status.PAID:
        return stock_commit(order=order)
    if order.status in (Status.CANCELLED, Status.EXPIRED, Status.PAYMENT_FAILED):
        return stock_release(order=order, reason=order.status)
    return []
