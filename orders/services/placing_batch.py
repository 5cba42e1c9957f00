"""The batch that places queued orders together: what their steps read, once, and their rows, written
together (``inventory.batching`` runs the step per order around it, in queue order)."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection

from core.clock import db_now
from core.db import statements_run
from drops.sql import gated_skus_statement
from inventory.batching import Batch
from inventory.services import (
    stock_reservations_create_for_orders,
)
from orders import sql
from orders.models import Order, new_order_number
from orders.pricing import Destination, OrderPrice, PricingRules, order_price
from orders.selectors import order_list_overdue_holding, order_units_held
from orders.services.lifecycle import order_list_expire
from orders.services.placing_rules import order_place_one
from orders.services.placing_wire import Placed, PlacedLine, PlacedPrice, PlaceRequest, order_row
from orders.services.voucher_facts import order_voucher_check, order_voucher_reads_from_rows, order_voucher_statements
from shipping.selectors import shipping_methods_from_rows
from shipping.sql import shipping_methods_statement
from shop.selectors import (
    OrderableVariant,
    variants_for_sale_from_rows,
    variants_for_sale_statement,
)
from tax.selectors import tax_rates_from_rows
from tax.sql import tax_rates_statement
from vouchers.rules import VoucherTerms
from vouchers.services import voucher_uses_reserve_statements

logger = logging.getLogger(__name__)


# How many overdue orders a new order may expire while it holds the locks.
OVERDUE_EXPIRY_LIMIT = 50


class KeyedOrder(NamedTuple):
    """An order placed with an idempotency key: what a replay of the key needs of it."""

    number: str
    fingerprint: str
    expires_at: datetime


@dataclass
class NewOrder:
    """An order staged by its step, inserted when the batch writes."""

    request: PlaceRequest
    variants: dict[str, OrderableVariant]
    price: OrderPrice
    placed: Placed
    index: int  # its place among the batch's staged rows
    voucher: VoucherTerms | None = None


class OrderBatch(Batch):
    """Orders placed together by one lock holder: what their steps read, once, and their rows, written together."""

    kind, request_type, result_type = "place", PlaceRequest, Placed

    def __init__(self, requests: list[PlaceRequest]):
        super().__init__(requests)
        # One round trip reads the orders placed before with the requests' keys, the products of every
        # line (a replay's too: replays are rare, and a product read and not used costs nothing), the
        # tax rates of the countries the orders may be taxed in, the shipping methods if one ships, and
        # the vouchers the requests name, their rows locked until the batch commits (``SELECT ... FOR
        # UPDATE``), so their uses stay as counted here.
        ships = any(r.shipping_address for r in requests)
        skus = {line.sku for r in requests for line in r.lines}
        codes = {r.voucher_code for r in requests if r.voucher_code}
        keyed, variants, gated, rates, *rest = statements_run(
            connection.alias,
            [
                sql.order_ids_with_keys_statement(
                    scopes={r.scope for r in requests}, key_hashes={r.key_hash for r in requests}
                ),
                variants_for_sale_statement(skus=skus),
                gated_skus_statement(skus=skus),
                tax_rates_statement(countries=_tax_countries(requests)),
                *([shipping_methods_statement()] if ships else []),
                *order_voucher_statements(codes=codes, skus=skus, buyers={r.buyer for r in requests}, lock=True),
            ],
        )
        self.rules = PricingRules(tax_rates_from_rows(rates), shipping_methods_from_rows(rest.pop(0)) if ships else [])
        self._prices: dict[tuple, OrderPrice] = {}
        self._vouchers = order_voucher_reads_from_rows(*rest)
        self._placed_before = orders_by_key([pk for (pk,) in keyed])
        self._new_by_key: dict[tuple[str, str], NewOrder] = {}
        self._skus = sorted(
            {line.sku for r in requests if (r.scope, r.key_hash) not in self._placed_before for line in r.lines}
        )
        self.variants = variants_for_sale_from_rows(variants)
        self.gated: dict[str, int] = dict(gated)  # SKU: the drop whose line alone sells it
        limited = {variant.pk for variant in self.variants.values() if variant.max_per_customer is not None}
        self._held = order_units_held(buyers={r.buyer for r in requests}, variant_ids=limited)
        self.now = db_now()

    def voucher(self, request: PlaceRequest, *, lines) -> VoucherTerms:
        """The request's voucher if it applies to its ``lines`` (``order_voucher_check``), the uses of the
        orders staged before it counted; else ``VoucherInvalid``."""
        staged = [(new.request.buyer, new.voucher) for new in self.staged]
        return order_voucher_check(
            self._vouchers, request.voucher_code, buyer=request.buyer, now=self.now, lines=lines, staged=staged
        )

    def price(self, lines: tuple, *, to: Destination, voucher=None, ships_later: bool = False) -> OrderPrice:
        """``order_price`` at the batch's rates and methods. A hot SKU's batch is many alike orders, so each
        distinct set of arguments is priced once (the function is pure, and ``OrderPrice`` immutable)."""
        key = (lines, to, voucher, ships_later)
        if (price := self._prices.get(key)) is None:
            price = self._prices[key] = order_price(
                list(lines), to=to, rules=self.rules, voucher=voucher, ships_later=ships_later
            )
        return price

    def variant_ids(self) -> set[int]:
        return {variant.pk for variant in self.variants.values()}

    def step(self, request: PlaceRequest) -> Placed:
        return order_place_one(request, self)

    def expires_at(self, request: PlaceRequest) -> datetime:
        """When the request's new order expires, on the database's clock: a hold when its checkout window
        lapses, any other order after ``RESERVATION_TTL_SECONDS``."""
        return self.now + timedelta(seconds=request.hold_seconds or settings.RESERVATION_TTL_SECONDS)

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

    def order_with_key(self, request: PlaceRequest) -> KeyedOrder | None:
        """The order placed with this request's key before the batch, or staged earlier in it."""
        key = (request.scope, request.key_hash)
        if (order := self._placed_before.get(key)) is not None:
            return KeyedOrder(order.number, order.request_fingerprint, order.expires_at)
        new = self._new_by_key.get(key)
        # An order whose step was undone is no longer staged at its place.
        if new is not None and new.index < len(self.staged) and self.staged[new.index] is new:
            return KeyedOrder(new.placed.number, new.request.fingerprint, new.placed.expires_at)
        return None

    def order_add(
        self,
        request: PlaceRequest,
        variants: dict[str, OrderableVariant],
        price: OrderPrice,
        voucher: VoucherTerms | None = None,
    ) -> Placed:
        """Stage a new order for the request (and its voucher's use); the result is filled in when the batch writes."""
        placed = Placed(new_order_number(), self.expires_at(request), price=PlacedPrice(**price.as_order_fields()))
        new = NewOrder(request, variants, price, placed, index=len(self.staged), voucher=voucher)
        self.stage(new)
        self._new_by_key[(request.scope, request.key_hash)] = new
        return new.placed

    def write(self) -> bool:
        """The orders with the stock's guarded UPDATEs (one round trip), then lines, reservations and ledger rows."""
        if not self.staged:
            return True
        insert, rows = sql.orders_insert_statement(
            rows=[
                order_row(new.request, number=new.placed.number, expires_at=new.placed.expires_at)
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
            expires_at=max(new.placed.expires_at for new in self.staged),  # each order's sweep releases its own
            statements=[insert, *voucher_uses_reserve_statements(uses)],
        )
        lines = sql.order_lines_stored(rows, line_ids)
        for order, new in zip(orders, self.staged, strict=True):
            new.placed.id, new.placed.created_at, new.placed.lines = order["id"], order["created_at"], []
        for (_, new, line, priced), row in zip(wanted, lines, strict=True):
            new.placed.lines.append(
                PlacedLine(
                    row["id"], row["variant_id"], row["unit_price"], new.variants[line.sku].name,
                    priced.line_total, priced.tax_rate, priced.tax, priced.discount,
                )
            )  # fmt: skip
        return True

    def free_more(self) -> int:
        return _orders_expire_overdue_holding(skus=self._skus)


def orders_by_key(ids: list[int]) -> dict[tuple[str, str], Order]:
    """The orders placed before with a batch's keys, by (scope, key hash), from their ids (replays, which
    are rare, load by ORM)."""
    if not ids:
        return {}
    return {
        (order.idempotency_scope, order.idempotency_key_hash): order for order in Order.all_objects.filter(pk__in=ids)
    }


def _tax_countries(requests: list[PlaceRequest]) -> set[str]:
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
