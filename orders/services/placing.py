"""Placing an order: the rules of one order, and the batch that places queued orders together.

``_order_place_one`` is the one place a rule about a single order goes: it sees one order and raises
its refusal. ``_OrderBatch`` reads what a batch of queued orders needs once and writes their rows
together; ``inventory.batching`` runs the step per order around it, in queue order.
"""

import functools
import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

import msgspec
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection

from core.clock import db_now
from core.db import from_row, insert_defaults, is_duplicate_key, prefetched_set, retry_on_deadlock, statements_run
from core.errors import DomainError, InvalidInput
from core.metrics import ORDERS_PLACED, ORDERS_REFUSED
from inventory.batching import Batch, Demand, stock_section_batched
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from inventory.services import (
    StockLine,
    stock_lines_validate,
    stock_reservations_create_for_orders,
)
from orders import sql
from orders.customers import email_address, email_canonical
from orders.errors import IdempotencyConflict, TooManyOpenOrders
from orders.models import Order, OrderLine, new_order_number
from orders.pricing import OrderPrice, order_price
from orders.selectors import order_count_open_guest, order_list_overdue_holding, order_units_held
from orders.services.lifecycle import order_list_expire
from orders.services.limits import order_lines_check_limits
from orders.services.paying import order_complete_free
from orders.services.quoting import order_addresses_check
from shipping.selectors import shipping_methods_from_rows, shipping_methods_statement
from shop.models import ProductVariant
from shop.selectors import (
    OrderableVariant,
    variants_for_sale_from_rows,
    variants_for_sale_statement,
    variants_orderable,
)
from tax.selectors import tax_rates_from_rows, tax_rates_statement
from vouchers.errors import VoucherInvalid
from vouchers.models import Voucher, voucher_code_normal
from vouchers.rules import VoucherTerms, voucher_check
from vouchers.selectors import VoucherReads, vouchers_read_from_rows, vouchers_read_statements
from vouchers.services import voucher_uses_reserve_statements

logger = logging.getLogger(__name__)


# How many overdue orders a new order may expire while it holds the locks.
OVERDUE_EXPIRY_LIMIT = 50


# A batch can fail on another buyer's duplicate key after a lost lock; the buyer then tries on its own.
PLACE_ATTEMPTS = 3


def _fingerprint(
    lines, *, shipping_address=None, billing_address=None, shipping_method_id=None, voucher_code=""
) -> str:
    """The request's hash: its lines and, when given, where it ships, how, whom it bills and its voucher."""
    request = sorted((line.sku, line.quantity) for line in lines)
    if shipping_address or billing_address or shipping_method_id is not None:
        request = [request, shipping_address, billing_address, shipping_method_id]
    if voucher_code:
        request = [request, voucher_code]
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


class _Buyer(NamedTuple):
    """Who places an order: whose idempotency keys it uses, who the limits count, the email it keeps."""

    scope: str
    buyer: str
    email: str


def _buyer_of(*, customer, email) -> _Buyer:
    """The account when logged in, else the guest's email (a valid one is required).

    A guest counts as their canonical email for the limits per customer (``email_canonical``), so a
    respelt address is the same customer; idempotency keys stay scoped by the address as given.
    """
    if email in (None, "") and customer is not None:
        return _Buyer(f"user:{customer.pk}", f"user:{customer.pk}", "")
    if not isinstance(email, str):
        raise InvalidInput(fields={"email": "Give an email address."})
    email = email_address(email)
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(fields={"email": "Give a valid email address."}) from None
    if len(email) > 254:
        raise InvalidInput(fields={"email": "At most 254 characters."})
    if customer is not None:
        return _Buyer(f"user:{customer.pk}", f"user:{customer.pk}", email)
    return _Buyer(f"email:{email}", f"email:{email_canonical(email)}", email)


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


class _PlaceRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An order to place, as it queues for a hot SKU's lock holder (``inventory.locks.wire`` encodes it)."""

    customer_id: int | None
    email: str
    scope: str
    buyer: str
    client_address: str
    idempotency_key: str
    key_hash: str  # hashed by the buyer, not by the lock holder serving a batch
    fingerprint: str
    lines: tuple[StockLine, ...]
    # Checked already (``shipping.addresses``); whether they are needed depends on the products.
    shipping_address: dict[str, str] | None = None
    billing_address: dict[str, str] | None = None
    shipping_method_id: int | None = None
    voucher_code: str = ""  # in capitals (``voucher_code_normal``); "" for none


class _PlacedLine(msgspec.Struct, array_like=True):
    """A new order's line as inserted, in the order of the request's lines: what its buyer is shown."""

    id: int
    variant_id: int
    unit_price: Decimal
    name: str
    line_total: Decimal
    tax_rate: Decimal
    tax: Decimal
    discount: Decimal = Decimal(0)


class _PlacedPrice(msgspec.Struct, array_like=True):
    """A new order's figures as inserted (``OrderPrice.as_order_fields``)."""

    shipping_method_id: int | None
    shipping_method_name: str
    currency: str
    prices_include_tax: bool
    subtotal: Decimal
    shipping_price: Decimal
    shipping_tax_rate: Decimal
    shipping_tax: Decimal
    tax: Decimal
    total: Decimal
    discount: Decimal = Decimal(0)
    voucher_code: str = ""


class _Placed(msgspec.Struct, array_like=True):
    """What the holder tells a buyer of its order: only what the buyer cannot know from its own request.

    ``replayed``: an order placed before with the same key, which the buyer loads as it is now. A new
    order's ``id``, ``created_at`` and ``lines`` are filled in when its batch inserts it, so the buyer
    answers without reading its order back.
    """

    number: str
    expires_at: datetime
    id: int = 0
    created_at: datetime | None = None
    replayed: bool = False
    lines: list[_PlacedLine] = []
    price: _PlacedPrice | None = None


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
) -> Order:
    """Create an order and reserve its stock, all or nothing. A replay of the same key returns the same order.

    Goods that are shipped need a ``shipping_address`` and the id of a ``shipping_method`` that goes
    there (``orders.pricing``); the ``billing_address`` is the shipping address unless given. The
    order stores copies of both and its figures as priced now. A ``voucher`` code takes its discount off,
    and one of its uses is reserved with the stock; a code that does not apply refuses the order
    (``VoucherInvalid``, with its reason).

    Orders for one SKU queue with its lock and are placed in batches, one commit per batch
    (``inventory.batching``): that is what keeps a flash sale on one SKU fast. The rules of one
    order are ``_order_place_one``. A guest (no ``customer``) may keep only so many unpaid orders
    from one ``client_address`` and among ``guest_orders`` (the numbers of a browser's orders).
    """
    lines = stock_lines_validate(lines=items)
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key.strip()) <= 64:
        raise InvalidInput(fields={"idempotency_key": "Give a key of 1 to 64 characters."})
    who = _buyer_of(customer=customer, email=email)
    voucher_code = _voucher_code_check(voucher)
    shipping_address, billing_address, shipping_method = order_addresses_check(
        shipping_address, billing_address, shipping_method
    )
    request = _PlaceRequest(
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
        ),
        lines=tuple(lines),
        shipping_address=shipping_address,
        billing_address=billing_address,
        shipping_method_id=shipping_method,
        voucher_code=voucher_code,
    )
    if customer is None:
        _guest_check_open_orders(request, guest_orders=guest_orders)
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


def _order_from_placed(request: "_PlaceRequest", placed: "_Placed") -> Order:
    """The new order as inserted, its lines and their products' SKUs and names at hand (no query)."""
    ORDERS_PLACED.inc()
    row = _order_row(request, number=placed.number, expires_at=placed.expires_at) | msgspec.structs.asdict(placed.price)
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
    if not isinstance(voucher, str) or len(voucher.strip()) > Voucher._meta.get_field("code").max_length:
        raise InvalidInput(fields={"voucher": "Give a voucher code of at most 40 characters."})
    return voucher_code_normal(voucher)


def _guest_check_open_orders(request: _PlaceRequest, *, guest_orders) -> None:
    """``TooManyOpenOrders`` once a guest's address or browser has ``GUEST_MAX_OPEN_ORDERS_PER_CLIENT``
    unpaid orders, unless this request replays one of them."""
    limit = settings.GUEST_MAX_OPEN_ORDERS_PER_CLIENT
    if order_count_open_guest(client_address=request.client_address, numbers=guest_orders) < limit:
        return
    if _order_replay(scope=request.scope, idempotency_key=request.idempotency_key, fingerprint=request.fingerprint):
        return
    raise TooManyOpenOrders(limit=limit)


def _order_place_one(request: _PlaceRequest, batch: "_OrderBatch") -> _Placed:
    """The rules of placing one order: what its buyer is told, or its refusal, raised.

    A key used before, or earlier in this batch (a double click), replays that order, unless the
    request differs. Every line must name a product on sale now, keep its buyer within the product's
    limit per customer, and be covered by the stock; its voucher, if it names one, must apply
    (``vouchers.rules``), with the uses staged by the orders before it counted. A new rule for an
    order goes here: raise its ``DomainError``; the batch runner undoes what this order staged (the
    units it took, too), and every order in the batch still gets the answer it would get alone.
    """
    earlier = batch.order_with_key(request)
    if earlier is not None:
        if earlier.fingerprint != request.fingerprint:
            raise IdempotencyConflict(number=earlier.number)
        return _Placed(earlier.number, earlier.expires_at, replayed=True)
    variants = variants_orderable(batch.variants, skus=[line.sku for line in request.lines], now=batch.now)
    order_lines_check_limits(
        [(line.sku, line.quantity) for line in request.lines],
        variants,
        held=lambda variant_id: batch.units_held(request.buyer, variant_id),
    )
    batch.stock.take([Demand(variants[line.sku].pk, line.sku, line.quantity) for line in request.lines])
    voucher = None
    if request.voucher_code:  # after the stock: a refusal here gives the units taken to the next buyer
        voucher = batch.voucher(request.voucher_code)
        voucher_check(
            voucher,
            now=batch.now,
            uses=batch.voucher_uses(voucher),
            buyer_uses=batch.voucher_uses(voucher, buyer=request.buyer),
            lines=[(variants[line.sku].pk, variants[line.sku].price * line.quantity) for line in request.lines],
        )
    price = batch.price(
        tuple((variants[line.sku], line.quantity) for line in request.lines),
        shipping_country=_country(request.shipping_address),
        billing_country=_country(request.billing_address),
        method_id=request.shipping_method_id,
        voucher=voucher,
    )
    return batch.order_add(request, variants, price, voucher)


class _KeyedOrder(NamedTuple):
    """An order placed with an idempotency key: what a replay of the key needs of it."""

    number: str
    fingerprint: str
    expires_at: datetime


@dataclass
class _NewOrder:
    """An order staged by its step, inserted when the batch writes."""

    request: _PlaceRequest
    variants: dict[str, OrderableVariant]
    price: OrderPrice
    placed: _Placed
    index: int  # its place among the batch's staged rows
    voucher: VoucherTerms | None = None


class _OrderBatch(Batch):
    """Orders placed together by one lock holder: what their steps read, once, and their rows, written together."""

    kind, request_type, result_type = "place", _PlaceRequest, _Placed

    def __init__(self, requests: list[_PlaceRequest]):
        super().__init__(requests)
        # One round trip reads the orders placed before with the requests' keys, the products of every
        # line (a replay's too: replays are rare, and a product read and not used costs nothing), the
        # tax rates of the countries the orders may be taxed in, the shipping methods if one ships, and
        # the vouchers the requests name, their rows locked until the batch commits (``SELECT ... FOR
        # UPDATE``), so their uses stay as counted here.
        ships = any(r.shipping_address for r in requests)
        codes = {r.voucher_code for r in requests if r.voucher_code}
        skus = {line.sku for r in requests for line in r.lines}
        keyed, variants, rates, *rest = statements_run(
            connection.alias,
            [
                sql.order_ids_with_keys_statement(
                    scopes={r.scope for r in requests}, key_hashes={r.key_hash for r in requests}
                ),
                variants_for_sale_statement(skus=skus),
                tax_rates_statement(countries=_tax_countries(requests)),
                *([shipping_methods_statement()] if ships else []),
                *(
                    vouchers_read_statements(codes=codes, skus=skus, buyers={r.buyer for r in requests}, lock=True)
                    if codes
                    else []
                ),
            ],
        )
        self.tax_rates = tax_rates_from_rows(rates)
        self._prices: dict[tuple, OrderPrice] = {}
        self.shipping_methods = shipping_methods_from_rows(rest.pop(0)) if ships else []
        self._vouchers = vouchers_read_from_rows(*rest) if codes else VoucherReads({}, Counter())
        self._placed_before = _orders_by_key([pk for (pk,) in keyed])
        self._new_by_key: dict[tuple[str, str], _NewOrder] = {}
        self._skus = sorted(
            {line.sku for r in requests if (r.scope, r.key_hash) not in self._placed_before for line in r.lines}
        )
        self.variants = variants_for_sale_from_rows(variants)
        limited = {variant.pk for variant in self.variants.values() if variant.max_per_customer is not None}
        self._held = order_units_held(buyers={r.buyer for r in requests}, variant_ids=limited)
        self.now = db_now()

    def voucher(self, code: str) -> VoucherTerms:
        """The voucher of this code, or ``VoucherInvalid`` (unknown)."""
        if (terms := self._vouchers.terms.get(code)) is None:
            raise VoucherInvalid(voucher=code, reason="unknown")
        return terms

    def voucher_uses(self, voucher: VoucherTerms, *, buyer: str | None = None) -> int:
        """Uses of a voucher held before the batch and staged in it; by ``buyer`` only, if given."""
        before = voucher.uses if buyer is None else self._vouchers.buyer_uses[(voucher.pk, buyer)]
        staged = sum(
            1
            for new in self.staged
            if new.voucher is not None and new.voucher.pk == voucher.pk and buyer in (None, new.request.buyer)
        )
        return before + staged

    def price(self, lines: tuple, *, shipping_country, billing_country, method_id, voucher=None) -> OrderPrice:
        """``order_price`` at the batch's rates and methods. A hot SKU's batch is many alike orders, so each
        distinct set of arguments is priced once (the function is pure, and ``OrderPrice`` immutable)."""
        key = (lines, shipping_country, billing_country, method_id, voucher)
        if (price := self._prices.get(key)) is None:
            price = self._prices[key] = order_price(
                list(lines),
                shipping_country=shipping_country,
                billing_country=billing_country,
                method_id=method_id,
                methods=self.shipping_methods,
                rates=self.tax_rates,
                voucher=voucher,
            )
        return price

    def variant_ids(self) -> set[int]:
        return {variant.pk for variant in self.variants.values()}

    def step(self, request: _PlaceRequest) -> _Placed:
        return _order_place_one(request, self)

    @property
    def expires_at(self) -> datetime:
        """When the batch's new orders expire: one deadline for all, on the database's clock."""
        return self.now + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)

    def units_held(self, buyer: str, variant_id: int) -> int:
        """Units of a product the buyer holds: in orders placed before the batch, and staged in it."""
        staged = sum(
            line.quantity
            for new in self.staged
            if new.request.buyer == buyer
            for line in new.request.lines
            if new.variants[line.sku].pk == variant_id
        )
        return self._held.get((buyer, variant_id), 0) + staged

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

    def order_add(
        self,
        request: _PlaceRequest,
        variants: dict[str, OrderableVariant],
        price: OrderPrice,
        voucher: VoucherTerms | None = None,
    ) -> _Placed:
        """Stage a new order for the request (and its voucher's use); the result is filled in when the batch writes."""
        placed = _Placed(new_order_number(), self.expires_at, price=_PlacedPrice(**price.as_order_fields()))
        new = _NewOrder(request, variants, price, placed, index=len(self.staged), voucher=voucher)
        self.stage(new)
        self._new_by_key[(request.scope, request.key_hash)] = new
        return new.placed

    def write(self) -> bool:
        """The orders with the stock's guarded UPDATEs (one round trip), then lines, reservations and ledger rows."""
        if not self.staged:
            return True
        insert, rows = sql.orders_insert_statement(
            rows=[
                _order_row(new.request, number=new.placed.number, expires_at=self.expires_at)
                | new.price.as_order_fields()
                for new in self.staged
            ],
        )
        results = self.stock.reserve([insert])
        if results is None:
            return False
        orders = sql.orders_stored(rows, *results)
        wanted = [
            (order, new, line, priced)
            for order, new in zip(orders, self.staged, strict=True)
            for line, priced in zip(new.request.lines, new.price.lines, strict=True)
        ]
        insert, rows = sql.order_lines_insert_statement(
            rows=[
                {
                    "order_id": order["id"],
                    "variant_id": new.variants[line.sku].pk,
                    "quantity": line.quantity,
                    "unit_price": new.variants[line.sku].price,
                    "line_total": priced.line_total,
                    "tax_rate": priced.tax_rate,
                    "tax": priced.tax,
                    "discount": priced.discount,
                }
                for order, new, line, priced in wanted
            ],
        )
        uses = [
            (new.voucher.pk, order["id"], new.request.buyer, new.price.discount)
            for order, new in zip(orders, self.staged, strict=True)
            if new.voucher is not None
        ]
        line_ids, *_ = stock_reservations_create_for_orders(
            order_ids=[order["id"] for order in orders],
            lines=len(rows),
            expires_at=self.expires_at,
            statements=[insert, *voucher_uses_reserve_statements(uses)],
        )
        lines = sql.order_lines_stored(rows, line_ids)
        for order, new in zip(orders, self.staged, strict=True):
            new.placed.id, new.placed.created_at, new.placed.lines = order["id"], order["created_at"], []
        for (_, new, line, priced), row in zip(wanted, lines, strict=True):
            new.placed.lines.append(
                _PlacedLine(
                    row["id"], row["variant_id"], row["unit_price"], new.variants[line.sku].name,
                    priced.line_total, priced.tax_rate, priced.tax, priced.discount,
                )
            )  # fmt: skip
        return True

    def free_more(self) -> int:
        return _orders_expire_overdue_holding(skus=self._skus)


def _orders_by_key(ids: list[int]) -> dict[tuple[str, str], Order]:
    """The orders placed before with a batch's keys, by (scope, key hash), from their ids (replays, which
    are rare, load by ORM)."""
    if not ids:
        return {}
    return {
        (order.idempotency_scope, order.idempotency_key_hash): order for order in Order.all_objects.filter(pk__in=ids)
    }


def _order_row(request: _PlaceRequest, *, number: str, expires_at: datetime) -> dict:
    """The order row a request makes: the holder inserts it (the model's defaults fill the other fields),
    and the buyer rebuilds it from ``_Placed``."""
    return {
        "number": number,
        "customer_id": request.customer_id,
        "email": request.email,
        "expires_at": expires_at,
        "idempotency_key": request.idempotency_key,
        "idempotency_key_hash": request.key_hash,
        "idempotency_scope": request.scope,
        "buyer": request.buyer,
        "client_address": request.client_address,
        "request_fingerprint": request.fingerprint,
        "shipping_address": request.shipping_address,
        "billing_address": request.billing_address,
    }


def _country(address: dict | None) -> str | None:
    return address["country"] if address else None


def _tax_countries(requests: list[_PlaceRequest]) -> set[str]:
    """The countries a batch's orders may be taxed in (``orders.pricing.order_price`` chooses)."""
    countries = {settings.SHOP_COUNTRY}
    for request in requests:
        for address in (request.shipping_address, request.billing_address):
            if address:
                countries.add(address["country"])
    return countries


def _orders_expire_overdue_holding(*, skus) -> int:
    """Expire overdue orders that hold these SKUs, if we hold the locks of all their SKUs; return how many.

    Orders that also hold other SKUs are left to the sweeper: taking more locks now could deadlock.
    """
    held = set(skus)
    overdue = order_list_overdue_holding(skus=skus).prefetch_related("lines__variant")[:OVERDUE_EXPIRY_LIMIT]
    expired = len(order_list_expire(orders=[order for order in overdue if set(order.skus) <= held]))
    if expired:
        logger.info("expired %d overdue order(s) holding %s to serve a new order", expired, sorted(held))
    return expired
