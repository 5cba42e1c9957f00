"""What an order costs: its lines' tax, its shipping and its totals, by one rounding rule.

The rule (docs/design.md, "Totals"): each line's tax is computed from the line's total (unit price x
quantity) less its share of a voucher's discount (``vouchers.rules``) at its rate, and rounded half up
to the currency's places once; the shipping is taxed the same way as one more line. The order's tax
is the sum of those rounded taxes, its subtotal the sum of the line totals, its discount the sum of the
lines' discounts, and its total the subtotal less the discount plus the shipping (plus the tax when
prices exclude it).
Each figure is stored with the order and its lines when it is placed, and never recomputed.

These functions see one order and read nothing: the batch that places orders, and the quote, read the
products, shipping methods and tax rates and hand them in.
"""

from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings

from core.errors import InvalidInput
from core.money import money_round
from shipping.errors import ShippingMethodUnavailable, ShippingUnavailable
from shipping.selectors import shipping_country_served, shipping_offers_for
from shipping.sql import ShippingOffer
from shop.selectors import OrderableVariant
from tax.selectors import TaxRates
from vouchers.rules import VoucherTerms, voucher_line_discounts

HUNDRED = Decimal(100)


@dataclass(frozen=True)
class PricedLine:
    line_total: Decimal
    tax_rate: Decimal
    tax: Decimal
    discount: Decimal = Decimal(0)


@dataclass(frozen=True)
class OrderPrice:
    """An order's figures as it stores them (``Order`` and ``OrderLine`` fields of the same names)."""

    lines: tuple[PricedLine, ...]
    shipping_method: ShippingOffer | None
    shipping_price: Decimal
    shipping_tax_rate: Decimal
    shipping_tax: Decimal
    subtotal: Decimal
    tax: Decimal
    total: Decimal
    currency: str
    prices_include_tax: bool
    discount: Decimal = Decimal(0)
    voucher_code: str = ""

    def as_order_fields(self) -> dict:
        return {
            "shipping_method_id": self.shipping_method.id if self.shipping_method else None,
            "shipping_method_name": self.shipping_method.name if self.shipping_method else "",
            "currency": self.currency,
            "prices_include_tax": self.prices_include_tax,
            "subtotal": self.subtotal,
            "shipping_price": self.shipping_price,
            "shipping_tax_rate": self.shipping_tax_rate,
            "shipping_tax": self.shipping_tax,
            "tax": self.tax,
            "total": self.total,
            "discount": self.discount,
            "voucher_code": self.voucher_code,
        }


def tax_of(amount: Decimal, rate: Decimal, *, included: bool, currency: str) -> Decimal:
    """The tax in ``amount`` (``included``) or on it, at ``rate`` percent, rounded by the shop's rule."""
    return money_round(amount * rate / (HUNDRED + rate) if included else amount * rate / HUNDRED, currency)


def order_ships(variants) -> bool:
    """Whether an order of ``products`` is shipped, and so asks for an address and a method."""
    return any(variant.requires_shipping for variant in variants)


def order_shipping_choose(
    methods: list[ShippingOffer], *, country: str, method_id: int | None, weight_grams: int, items_amount: Decimal
) -> ShippingOffer:
    """The method chosen for an order going to ``country``, at its price for this order.

    ``ShippingUnavailable`` when no zone covers the country; ``ShippingMethodUnavailable`` (with the
    methods that do go) when the one chosen does not take this order there.
    """
    if not shipping_country_served(methods, country=country):
        raise ShippingUnavailable(country=country)
    offers = shipping_offers_for(methods, country=country, weight_grams=weight_grams, items_amount=items_amount)
    if method_id is None:
        raise InvalidInput(fields={"shipping_method": "Choose a shipping method."})
    for offer in offers:
        if offer.id == method_id:
            return offer
    raise ShippingMethodUnavailable(country=country, methods=[offer.id for offer in offers])


def order_weight_grams(lines: list[tuple[OrderableVariant, int]]) -> int:
    """The parcel's weight: the shipped products' weights (unknown: 0) times their quantities."""
    return sum((variant.weight_grams or 0) * quantity for variant, quantity in lines if variant.requires_shipping)


class PricingRules(NamedTuple):
    """What prices an order besides its lines, read for it (or once for a batch): tax rates, shipping methods."""

    rates: TaxRates
    methods: list[ShippingOffer]


class Destination(NamedTuple):
    """Where an order goes and is billed (ISO codes; None: no such address) and the shipping method chosen."""

    shipping_country: str | None
    billing_country: str | None
    method_id: int | None

    @classmethod
    def of(cls, *, shipping_address: dict | None, billing_address: dict | None, method_id: int | None):
        """The destination of an order's or a request's addresses, as stored (``shipping.addresses``)."""
        return cls(
            shipping_address["country"] if shipping_address else None,
            billing_address["country"] if billing_address else None,
            method_id,
        )


def order_price(
    lines: list[tuple[OrderableVariant, int]],
    *,
    to: Destination,
    rules: PricingRules,
    voucher: VoucherTerms | None = None,
    ships_later: bool = False,
) -> OrderPrice:
    """The figures of an order of ``lines`` (product, quantity) sent ``to`` a country by a method, billed in a
    country, at the ``rules``' rates and methods.

    Taxed where the goods go; an order that ships nothing where its buyer bills, else in the shop's
    country. Refusals are raised: a missing address or method, a country or method that does not ship.
    A ``voucher`` (checked already: ``vouchers.rules.voucher_check``) takes its discount off the lines, or
    the shipping's price if it gives free shipping. ``ships_later``: goods that are shipped may come
    without an address (a drop's hold, priced again at its checkout): priced in the shop's country, no
    shipping.
    """
    shipping_country, billing_country, method_id = to
    rates, methods = rules
    currency, included = settings.SHOP_CURRENCY, settings.PRICES_INCLUDE_TAX
    ships = order_ships(variant for variant, _ in lines)
    country = shipping_country if ships else None
    if ships and country is None and not ships_later:
        raise InvalidInput(fields={"shipping_address": "These goods are shipped: give a shipping address."})
    tax_country = country or billing_country or settings.SHOP_COUNTRY
    totals = [(variant.pk, variant.price * quantity) for variant, quantity in lines]
    discounts = voucher_line_discounts(voucher, totals, currency=currency) if voucher else [Decimal(0)] * len(lines)
    priced = []
    for (variant, _), (_, line_total), discount in zip(lines, totals, discounts, strict=True):
        rate = rates.rate(country=tax_country, tax_class_id=variant.tax_class_id)
        tax = tax_of(line_total - discount, rate, included=included, currency=currency)
        priced.append(PricedLine(line_total, rate, tax, discount))
    subtotal = sum((line.line_total for line in priced), start=Decimal(0))
    discount = sum(discounts, start=Decimal(0))
    method, shipping_price, shipping_rate, shipping_tax = None, Decimal(0), Decimal(0), Decimal(0)
    if country is not None:
        method = order_shipping_choose(
            methods, country=country, method_id=method_id, weight_grams=order_weight_grams(lines), items_amount=subtotal
        )
        shipping_price = Decimal(0) if voucher and voucher.free_shipping else method.price
        if settings.SHIPPING_TAXED:
            shipping_rate = rates.rate(country=tax_country, tax_class_id=None)
            shipping_tax = tax_of(shipping_price, shipping_rate, included=included, currency=currency)
    tax = sum((line.tax for line in priced), start=shipping_tax)
    return OrderPrice(
        lines=tuple(priced),
        shipping_method=method,
        shipping_price=shipping_price,
        shipping_tax_rate=shipping_rate,
        shipping_tax=shipping_tax,
        subtotal=subtotal,
        tax=tax,
        total=subtotal - discount + shipping_price + (0 if included else tax),
        currency=currency,
        prices_include_tax=included,
        discount=discount,
        voucher_code=voucher.code if voucher else "",
    )
