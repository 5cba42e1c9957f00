"""Reviving an expired or declined order when its buyer pays again: its lines reserved anew, only if it
may still be paid as placed (within its grace, at the prices, tax rates and shipping it stores)."""

from datetime import timedelta

from django.conf import settings

from core.clock import db_now
from core.errors import DomainError
from inventory.errors import InsufficientStock
from inventory.services import stock_reserve
from orders.errors import OrderExpired, OrderNotPayable
from orders.models import Order
from orders.pricing import Destination, order_price
from orders.selectors import order_units_held
from orders.services.lifecycle import Status, order_transition
from orders.services.limits import order_lines_check_limits
from orders.services.quoting import pricing_rules
from orders.services.voucher_facts import order_voucher_check, order_voucher_read
from shop.selectors import variant_map_orderable
from vouchers.errors import VoucherInvalid
from vouchers.selectors import voucher_use_released, vouchers_read
from vouchers.services import voucher_use_reserve_again


def order_reserve_again(order: Order, *, paid_at=None) -> None:
    """Reserve an expired order's lines anew, if it may be revived (``_order_check_revivable``, judged at
    ``paid_at``: when its charge was taken, however long applying it waited) and its buyer stays within
    each product's limit per customer."""
    now = db_now()
    variants = variant_map_orderable(skus=order.skus, now=now)
    _order_check_revivable(order, variants, at=paid_at or now)
    limited = {variant.pk for variant in variants.values() if variant.max_per_customer is not None}
    held = order_units_held(buyers={order.buyer}, variant_ids=limited)
    order_lines_check_limits(
        [(line.variant.sku, line.quantity) for line in order.lines_with_variants()],
        variants,
        held=lambda variant_id: held.get((order.buyer, variant_id), 0),
    )
    if order.voucher_code and (use := voucher_use_released(order_id=order.pk)) is not None:
        _order_check_voucher_again(order, use.voucher.code, at=paid_at or now)
        voucher_use_reserve_again(use)
    expires_at = now + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    if not order_transition(
        order, from_statuses=[Status.EXPIRED, Status.PAYMENT_FAILED], to=Status.AWAITING_PAYMENT, expires_at=expires_at
    ):
        raise OrderNotPayable(number=order.number, status=order.status)
    try:
        stock_reserve(order=order, expires_at=expires_at)
    except InsufficientStock as exc:
        raise OrderExpired(number=order.number, shortages=exc.payload["shortages"]) from exc


def _order_check_voucher_again(order: Order, code: str, *, at) -> None:
    """The voucher of an expired order's released use must still apply at ``at`` (when the charge was
    taken) with a use free, its row locked until the transaction ends; else ``OrderExpired``."""
    read = order_voucher_read(codes=[code], skus=order.skus, buyers=[order.buyer], lock=True)
    lines = [(line.variant_id, line.line_total) for line in order.lines_with_variants()]
    try:
        order_voucher_check(read, code, buyer=order.buyer, now=at, lines=lines)
    except VoucherInvalid as refusal:
        raise OrderExpired(
            f"The voucher can no longer be used ({refusal.detail}); place a new order.", number=order.number
        ) from refusal


def _order_totals_hold(order: Order, lines) -> bool:
    """Whether the order, priced now with today's tax rates and shipping methods, costs what it stores."""
    countries = {address["country"] for address in (order.shipping_address, order.billing_address) if address}
    rules = pricing_rules(countries=countries | {settings.SHOP_COUNTRY}, ships=order.shipping_address is not None)
    voucher = None
    if order.voucher_code:
        voucher = vouchers_read(codes=[order.voucher_code], skus=order.skus).terms.get(order.voucher_code)
        if voucher is None:  # deleted since
            return False
    try:
        to = Destination.of(
            shipping_address=order.shipping_address,
            billing_address=order.billing_address,
            method_id=order.shipping_method_id,
        )
        now = order_price(lines, to=to, rules=rules, voucher=voucher)
    except DomainError:  # the method is gone, the country no longer served, goods now shipped
        return False
    return (now.subtotal, now.discount, now.shipping_price, now.tax, now.total, now.currency) == (
        order.subtotal, order.discount, order.shipping_price, order.tax, order.total, order.currency,
    )  # fmt: skip


def _order_check_revivable(order: Order, variants: dict, *, at) -> None:
    """An expired order is paid as placed only within EXPIRED_ORDER_PAYABLE_SECONDS of its expiry (on the
    database's clock) and while every line's price and the order's totals (tax rates, shipping) are
    unchanged; otherwise ``OrderExpired`` with today's prices, and the buyer places a new order at them."""
    lines = order.lines_with_variants()
    too_late = at > order.expires_at + timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS)
    if (
        too_late
        or any(variants[line.variant.sku].price != line.unit_price for line in lines)
        or (not _order_totals_hold(order, [(variants[line.variant.sku], line.quantity) for line in lines]))
    ):
        prices = [{"sku": sku, "price": str(variants[sku].price)} for sku in sorted(variants)]
        raise OrderExpired(
            "The reservation expired too long ago, or a price changed since; place a new order.",
            number=order.number,
            prices=prices,
        )
