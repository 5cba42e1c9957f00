"""Order lifecycle. Stock moves only through ``inventory.services``, inside its stock section.

Every status change is a conditional UPDATE on the current status (``_order_transition``), so a
payment racing an expiry has exactly one winner, and the stock change rides in the same transaction.
"""

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

import msgspec
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Sum
from django.db.models.functions import Now
from django.utils import timezone

from inventory.batching import Batch, Demand, stock_section_batched
from inventory.errors import DomainError, InsufficientStock, InvalidInput, LockTimeout, LockUnavailable
from inventory.models import Reservation
from inventory.section import stock_section
from inventory.services import (
    ReservationLine,
    StockLine,
    retry_on_deadlock,
    stock_commit,
    stock_lines_validate,
    stock_release,
    stock_reservations_create,
    stock_reserve,
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
from shop.basemodels import bulk_insert, from_row, select_in
from shop.clock import db_now
from shop.selectors import OrderableProduct, product_map_for_sale, product_map_orderable, products_orderable

logger = logging.getLogger(__name__)

Status = Order.Status

# How many overdue orders a new order may expire while it holds the locks.
OVERDUE_EXPIRY_LIMIT = 50
# A batch can fail on another buyer's duplicate key after a lost lock; the buyer then tries on its own.
PLACE_ATTEMPTS = 3
DUPLICATE_KEY = 1062  # MySQL/MariaDB error number


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


class _Placed(msgspec.Struct, array_like=True):
    """What the holder tells a buyer of its order: only what the buyer cannot know from its own request.

    ``replayed``: an order placed before with the same key, which the buyer loads as it is now. A new
    order's ``id`` and ``created_at`` are filled in when its batch inserts it.
    """

    number: str
    expires_at: datetime
    id: int = 0
    created_at: datetime | None = None
    replayed: bool = False


def order_place(*, customer=None, email: str = "", items, idempotency_key: str) -> Order:
    """Create an order and reserve its stock, all or nothing. A replay of the same key returns the same order.

    Orders for one SKU queue with its lock and are placed in batches, one commit per batch
    (``inventory.batching``): that is what keeps a flash sale on one SKU fast. The rules of one
    order are ``_order_place_one``.
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
            placed = retry_on_deadlock(
                lambda: stock_section_batched(
                    skus=[line.sku for line in lines], batch_type=_OrderBatch, request=request
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
            if not _is_duplicate_key(exc) or attempt == PLACE_ATTEMPTS:
                raise
            logger.warning("order placement hit a duplicate key (a lost lock?); trying again: %s", exc)
    if placed.replayed:
        return Order.all_objects.get(number=placed.number)
    row = _order_row(request, number=placed.number, expires_at=placed.expires_at)
    return from_row(
        Order,
        row
        | {"id": placed.id, "created_at": placed.created_at, "updated_at": placed.created_at}
        | {"is_deleted": False, "deleted_at": None},
    )


def _is_duplicate_key(exc: Exception) -> bool:
    return isinstance(exc, IntegrityError) and exc.args[:1] == (DUPLICATE_KEY,)


def _order_place_one(request: _PlaceRequest, batch: "_OrderBatch") -> _Placed:
    """The rules of placing one order: what its buyer is told, or its refusal, raised.

    A key used before, or earlier in this batch (a double click), replays that order, unless the
    request differs. Every line must name a product for sale, and the stock must cover every line.
    A new rule for an order goes here: raise its ``DomainError``; the batch runner undoes what this
    order staged, and every order in the batch still gets the answer it would get alone.
    """
    earlier = batch.order_with_key(request)
    if earlier is not None:
        if earlier.fingerprint != request.fingerprint:
            raise IdempotencyConflict(number=earlier.number)
        return _Placed(earlier.number, earlier.expires_at, replayed=True)
    products = products_orderable(batch.products, skus=[line.sku for line in request.lines])
    batch.stock.take([Demand(products[line.sku].pk, line.sku, line.quantity) for line in request.lines])
    return batch.order_add(request, products)


class _KeyedOrder(NamedTuple):
    """An order placed with an idempotency key: what a replay of the key needs of it."""

    number: str
    fingerprint: str
    expires_at: datetime


@dataclass
class _NewOrder:
    """An order staged by its step, inserted when the batch writes."""

    request: _PlaceRequest
    products: dict[str, OrderableProduct]
    placed: _Placed
    index: int  # its place among the batch's staged rows


class _OrderBatch(Batch):
    """Orders placed together by one lock holder: what their steps read, once, and their rows, written together."""

    kind, request_type, result_type = "place", _PlaceRequest, _Placed

    def __init__(self, requests: list[_PlaceRequest]):
        super().__init__(requests)
        self._placed_before = _orders_by_key(requests)
        self._new_by_key: dict[tuple[str, str], _NewOrder] = {}
        self._skus = sorted(
            {line.sku for r in requests if (r.scope, r.key_hash) not in self._placed_before for line in r.lines}
        )
        self.products = product_map_for_sale(skus=self._skus)
        self._expires_at = None

    def product_ids(self) -> set[int]:
        return {product.pk for product in self.products.values()}

    def step(self, request: _PlaceRequest) -> _Placed:
        return _order_place_one(request, self)

    @property
    def expires_at(self) -> datetime:
        """When the batch's new orders expire: one deadline for all, on the database's clock."""
        if self._expires_at is None:
            self._expires_at = db_now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
        return self._expires_at

    def order_with_key(self, request: _PlaceRequest) -> _KeyedOrder | None:
        """The order placed with this request's key before the batch, or staged earlier in it."""
        key = (request.scope, request.key_hash)
        if (order := self._placed_before.get(key)) is not None:
            return _KeyedOrder(order.number, order.request_fingerprint, order.expires_at)
        new = self._new_by_key.get(key)
        # An order whose step was undone is no longer staged at its place.
        if new is not None and new.index < len(self.staged) and self.staged[new.index] is new:
            return _KeyedOrder(new.placed.number, new.request.fingerprint, new.placed.expires_at)
        return None

    def order_add(self, request: _PlaceRequest, products: dict[str, OrderableProduct]) -> _Placed:
        """Stage a new order for the request; the result is filled in when the batch writes."""
        new = _NewOrder(request, products, _Placed(new_order_number(), self.expires_at), index=len(self.staged))
        self.stage(new)
        self._new_by_key[(request.scope, request.key_hash)] = new
        return new.placed

    def write(self) -> bool:
        """The stock (one guarded UPDATE per SKU), then orders, lines, reservations and ledger rows."""
        if not self.staged:
            return True
        if not self.stock.reserve():
            return False
        orders = bulk_insert(
            Order,
            [_order_row(new.request, number=new.placed.number, expires_at=self.expires_at) for new in self.staged],
        )
        wanted = [
            (order, new, line) for order, new in zip(orders, self.staged, strict=True) for line in new.request.lines
        ]
        lines = bulk_insert(
            OrderLine,
            [
                {
                    "order_id": order["id"],
                    "product_id": new.products[line.sku].pk,
                    "quantity": line.quantity,
                    "unit_price": new.products[line.sku].price,
                }
                for order, new, line in wanted
            ],
        )
        stock_reservations_create(
            lines=[
                ReservationLine(line.sku, row["id"], row["product_id"], row["quantity"])
                for (_, _, line), row in zip(wanted, lines, strict=True)
            ],
            expires_at=self.expires_at,
        )
        for order, new in zip(orders, self.staged, strict=True):
            new.placed.id, new.placed.created_at = order["id"], order["created_at"]
        return True

    def free_more(self) -> int:
        return _orders_expire_overdue_holding(skus=self._skus)


def _orders_by_key(requests: list[_PlaceRequest]) -> dict[tuple[str, str], Order]:
    """Orders already placed with these requests' idempotency keys.

    Plain SQL: a lock holder runs it once per batch, and a batch of new orders finds none, so
    building the query with the ORM would be most of its cost. Only replays, which are rare, are
    loaded with the ORM.
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
    from orders.tasks import release_order_stock

    with transaction.atomic():
        if not _order_transition(order, from_statuses=[Status.AWAITING_PAYMENT], to=Status.PAYMENT_FAILED):
            return False
        # robust: the change has committed; a broker that is down is logged, and the sweep releases instead.
        transaction.on_commit(lambda: release_order_stock.delay(order.pk), robust=True)
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
