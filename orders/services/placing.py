"""Placing an order: the rules of one order, and the batch that places queued orders together.

``order_place`` checks what a buyer sent and queues it; ``placing_rules.order_place_one`` is the one place
a rule about a single order goes; ``placing_batch.OrderBatch`` reads what a batch of queued orders needs
once and writes their rows together; ``placing_wire`` is what queues and what is answered.
"""

import functools
import hashlib
import json
import logging

import msgspec
from django.conf import settings
from django.db import IntegrityError

from core.db import from_row, insert_defaults, is_duplicate_key, prefetched_set, retry_on_deadlock
from core.errors import DomainError, InvalidInput
from core.metrics import ORDERS_PLACED, ORDERS_REFUSED
from inventory.batching import stock_section_batched
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from inventory.services import (
    stock_lines_validate,
)
from orders import sql
from orders.customers import buyer_identify
from orders.errors import IdempotencyConflict, TooManyOpenOrders
from orders.models import Order, OrderLine
from orders.selectors import order_count_open_guest
from orders.services.lifecycle import order_complete_free
from orders.services.placing_batch import OrderBatch
from orders.services.placing_wire import Placed, PlaceRequest, order_row
from orders.services.quoting import order_addresses_check
from shop.models import ProductVariant
from vouchers.models import VOUCHER_CODE_MAX_LENGTH, voucher_code_normal

logger = logging.getLogger(__name__)


# A batch can fail on another buyer's duplicate key after a lost lock; the buyer then tries on its own.
PLACE_ATTEMPTS = 3


def _fingerprint(
    lines, *, shipping_address=None, billing_address=None, shipping_method_id=None, voucher_code="", **later
) -> str:
    """The request's hash: its lines and, when given, where it ships, how, whom it bills, its voucher, and
    the buyer fields (``later``: ``Order.BUYER_FIELDS`` by name, those given only): a request without
    them hashes as it always did, so the orders placed before a new buyer field still replay."""
    request = sorted((line.sku, line.quantity) for line in lines)
    if shipping_address or billing_address or shipping_method_id is not None:
        request = [request, shipping_address, billing_address, shipping_method_id]
    if voucher_code:
        request = [request, voucher_code]
    if given := {name: value for name, value in later.items() if value not in (None, "")}:
        request = [request, given]
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def _key_hash(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def _order_replay(*, scope: str, idempotency_key: str, fingerprint: str) -> Order | None:
    """The order an earlier request with this key placed, if any; a different request is a conflict.

    Asked after every refusal (was it a retry of an order placed meanwhile?), so the look-up is one
    plain-SQL read of the key's unique index; only a replay loads the order.
    """
    ids = sql.order_ids_with_keys(scopes={scope}, key_hashes={_key_hash(idempotency_key)})
    if not ids:
        return None
    order = Order.all_objects.get(pk=ids[0])
    if order.request_fingerprint != fingerprint:
        raise IdempotencyConflict(number=order.number)
    return order


def _counted(place):
    """Count each order placed, and each refused by its code (``core.metrics``), however it was asked for."""

    @functools.wraps(place)
    def counted(**kwargs) -> Order:
        try:
            return place(**kwargs)
        except DomainError as refusal:
            ORDERS_REFUSED.labels(code=refusal.code).inc()
            raise

    return counted


@_counted
def order_place(
    *,
    customer=None,
    email: str = "",
    items,
    idempotency_key: str,
    client_address: str = "",
    guest_orders=(),
    shipping_address: dict | None = None,
    billing_address: dict | None = None,
    shipping_method: int | None = None,
    voucher: str = "",
    given: dict | None = None,
    hold_seconds: int = 0,
) -> Order:
    """Create an order and reserve its stock, all or nothing. A replay of the same key returns the same order.

    Goods that are shipped need a ``shipping_address`` and the id of a ``shipping_method`` that goes
    there (``orders.pricing``); the ``billing_address`` is the shipping address unless given. The
    order stores copies of both and its figures as priced now. A ``voucher`` code takes its discount off,
    and one of its uses is reserved with the stock; a code that does not apply refuses the order
    (``VoucherInvalid``, with its reason). ``given``: the buyer fields (``Order.BUYER_FIELDS``) by name.
    ``hold_seconds``: place a hold for a buyer a drop's line admitted (``orders.services.holding``, the
    only caller): HELD that long, addresses and method given at its checkout; without it, a SKU that
    sells only through a drop's line is refused (``NotAdmitted``).

    Orders for one SKU queue with its lock and are placed in batches, one commit per batch
    (``inventory.batching``): that is what keeps a flash sale on one SKU fast. The rules of one
    order are ``order_place_one``. A guest (no ``customer``) may keep only so many unpaid orders
    from one ``client_address`` and among ``guest_orders`` (the numbers of a browser's orders).
    """
    lines = stock_lines_validate(lines=items)
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key.strip()) <= 64:
        raise InvalidInput(fields={"idempotency_key": "Give a key of 1 to 64 characters."})
    who = buyer_identify(customer=customer, email=email)
    voucher_code = _voucher_code_check(voucher)
    given = buyer_fields_check(given or {})
    shipping_address, billing_address, shipping_method = order_addresses_check(
        shipping_address, billing_address, shipping_method
    )
    request = PlaceRequest(
        customer_id=customer.pk if customer is not None else None,
        email=who.email,
        scope=who.scope,
        buyer=who.buyer,
        client_address=client_address,
        idempotency_key=idempotency_key.strip(),
        key_hash=_key_hash(idempotency_key.strip()),
        fingerprint=_fingerprint(
            lines,
            shipping_address=shipping_address,
            billing_address=billing_address,
            shipping_method_id=shipping_method,
            voucher_code=voucher_code,
            **given,
        ),
        lines=tuple(lines),
        shipping_address=shipping_address,
        billing_address=billing_address,
        shipping_method_id=shipping_method,
        voucher_code=voucher_code,
        given=given,
        hold_seconds=hold_seconds,
    )
    if customer is None:
        _guest_check_open_orders(request, guest_orders=guest_orders)
    for attempt in range(1, PLACE_ATTEMPTS + 1):
        try:
            # A deadlock victim (say, with a sweeper) was rolled back whole: nothing happened, try again.
            placed = retry_on_deadlock(
                lambda: stock_section_batched(skus=[line.sku for line in lines], batch_type=OrderBatch, request=request)
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
                    scope=request.scope, idempotency_key=request.idempotency_key, fingerprint=request.fingerprint
                ):
                    return order_complete_free(order=existing)
            except IdempotencyConflict:
                # The key now names another order (a request after ours in the same batch, say): ours
                # was not placed, and a shortage is the answer it had.
                if isinstance(exc, InsufficientStock):
                    raise exc from None
                raise
            if not is_duplicate_key(exc) or attempt == PLACE_ATTEMPTS:
                raise
            logger.warning("order placement hit a duplicate key (a lost lock?); trying again: %s", exc)
    if placed.replayed:  # a free order is paid at once, also if its first placing stopped before
        return order_complete_free(order=Order.all_objects.get(number=placed.number))
    return order_complete_free(order=_order_from_placed(request, placed))


def _order_from_placed(request: "PlaceRequest", placed: "Placed") -> Order:
    """The new order as inserted, its lines and their products' SKUs and names at hand (no query)."""
    ORDERS_PLACED.inc()
    row = order_row(request, number=placed.number, expires_at=placed.expires_at) | msgspec.structs.asdict(placed.price)
    stamps = {"id": placed.id, "created_at": placed.created_at, "updated_at": placed.created_at}
    order = from_row(Order, insert_defaults(Order) | row | stamps)
    lines = []
    for requested, line in zip(request.lines, placed.lines, strict=True):
        order_line = from_row(
            OrderLine,
            insert_defaults(OrderLine)
            | {
                "id": line.id,
                "order_id": order.pk,
                "variant_id": line.variant_id,
                "quantity": requested.quantity,
                "unit_price": line.unit_price,
                "line_total": line.line_total,
                "tax_rate": line.tax_rate,
                "tax": line.tax,
                "discount": line.discount,
            }
            | {"created_at": placed.created_at, "updated_at": placed.created_at},
        )
        order_line.order = order
        order_line.variant = from_row(ProductVariant, {"id": line.variant_id, "sku": requested.sku, "name": line.name})
        lines.append(order_line)
    order = prefetched_set(prefetched_set(order, "lines", lines), "shipments", [])  # a new order has none
    return prefetched_set(prefetched_set(order, "refunds", []), "returns", [])


def _voucher_code_check(voucher) -> str:
    """The code as compared (``voucher_code_normal``), "" for none; ``InvalidInput`` if it is no code."""
    if voucher is None:
        return ""
    if not isinstance(voucher, str) or len(voucher.strip()) > VOUCHER_CODE_MAX_LENGTH:
        raise InvalidInput(fields={"voucher": f"Give a voucher code of at most {VOUCHER_CODE_MAX_LENGTH} characters."})
    return voucher_code_normal(voucher)


def buyer_fields_check(given: dict) -> dict[str, str]:
    """The buyer fields given, stripped, those left empty dropped; ``InvalidInput`` for a name that is not a
    buyer field (``Order.BUYER_FIELDS``), or a value that is no text or is longer than its column."""
    checked = {}
    for name, value in given.items():
        if name not in Order.BUYER_FIELDS:
            raise InvalidInput(fields={name: "No such field."})
        max_length = Order._meta.get_field(name).max_length
        if not isinstance(value, str) or len(value.strip()) > max_length:
            raise InvalidInput(fields={name: f"Give a text of at most {max_length} characters."})
        if value.strip():
            checked[name] = value.strip()
    return checked


def _guest_check_open_orders(request: PlaceRequest, *, guest_orders) -> None:
    """``TooManyOpenOrders`` once a guest's address or browser has ``GUEST_MAX_OPEN_ORDERS_PER_CLIENT``
    unpaid orders, unless this request replays one of them."""
    limit = settings.GUEST_MAX_OPEN_ORDERS_PER_CLIENT
    if order_count_open_guest(client_address=request.client_address, numbers=guest_orders) < limit:
        return
    if _order_replay(scope=request.scope, idempotency_key=request.idempotency_key, fingerprint=request.fingerprint):
        return
    raise TooManyOpenOrders(limit=limit)
