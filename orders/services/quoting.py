"""What an order would cost, before it is placed: the shipping methods that go and the totals.

The checkout page and ``POST /api/checkout/quote/`` ask this; placing prices the order again under its
stock lock with the same rules (``orders.pricing``), on the products, rates and methods of that moment.
"""

from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from core.clock import db_now
from core.db import statements_run
from core.errors import InvalidInput
from inventory.services import stock_lines_validate
from orders.pricing import Destination, OrderPrice, PricingRules, order_price, order_ships, order_weight_grams
from orders.services.voucher_facts import order_voucher_check, order_voucher_read
from shipping.addresses import address_clean
from shipping.selectors import shipping_methods_from_rows, shipping_offers_for
from shipping.sql import ShippingOffer, shipping_methods_statement
from shop.selectors import OrderableVariant, variant_map_orderable
from tax.selectors import tax_rates_from_rows
from tax.sql import tax_rates_statement
from vouchers.models import voucher_code_normal
from vouchers.rules import VoucherTerms


@dataclass(frozen=True)
class Quote:
    """An order's figures as it would be placed now, and the methods the buyer may choose (cheapest first).

    ``price`` is None when the goods are shipped and no country was given yet."""

    skus: list[str]
    lines: list[tuple[OrderableVariant, int]]
    ships: bool
    shipping_offers: list[ShippingOffer]
    price: OrderPrice | None


def order_addresses_check(shipping_address, billing_address, shipping_method):
    """The addresses checked and normalised, and the method's id; ``InvalidInput`` names each bad field,
    prefixed with its address's name. A billing address equal to the shipping one is not kept twice."""
    errors, checked = {}, []
    for name, address in (("shipping_address", shipping_address), ("billing_address", billing_address)):
        try:
            checked.append(None if address in (None, {}) else address_clean(address))
        except InvalidInput as exc:
            fields = exc.payload["fields"]
            errors |= {f"{name}.{field}" if field else name: message for field, message in fields.items()}
            checked.append(None)
    if shipping_method is not None and (isinstance(shipping_method, bool) or not isinstance(shipping_method, int)):
        errors["shipping_method"] = "Give the id of a shipping method."
    if errors:
        raise InvalidInput(fields=errors)
    shipping, billing = checked
    return shipping, (None if billing == shipping else billing), shipping_method


def pricing_rules(*, countries: set[str], ships: bool) -> PricingRules:
    """The tax rates of ``countries`` (and the shop's) and, if the order ships, the shipping methods:
    one round trip."""
    rates, *methods = statements_run(
        connection.alias,
        [
            tax_rates_statement(countries=(countries - {None}) | {settings.SHOP_COUNTRY}),
            *([shipping_methods_statement()] if ships else []),
        ],
    )
    return PricingRules(tax_rates_from_rows(rates), shipping_methods_from_rows(methods[0]) if ships else [])


def order_quote(
    *,
    items,
    shipping_country: str | None = None,
    billing_country: str | None = None,
    shipping_method=None,
    voucher: str = "",
    buyer: str | None = None,
) -> Quote:
    """The figures of an order of ``items`` sent to ``shipping_country`` (an ISO code); with no method
    chosen, the cheapest that goes there; with a ``voucher`` code, its discount (``buyer``, as placing
    names buyers, for its limit per customer). Refusals as placing raises them (unknown products, a
    country no zone covers, a method that does not go, a voucher that does not apply); stock is not
    checked here: placing does, under the lock, and counts the voucher's uses again there."""
    lines = stock_lines_validate(lines=items)
    now = db_now()
    variants = variant_map_orderable(skus=[line.sku for line in lines], now=now)
    priced_lines = [(variants[line.sku], line.quantity) for line in lines]
    terms = _voucher_terms(voucher, variants=variants, lines=lines, now=now, buyer=buyer) if voucher else None
    ships = order_ships(variants.values())
    rules = pricing_rules(countries={shipping_country, billing_country}, ships=ships)
    skus = [line.sku for line in lines]
    if ships and shipping_country is None:
        return Quote(skus=skus, lines=priced_lines, ships=True, shipping_offers=[], price=None)
    offers = []
    if ships:
        items_amount = sum((variant.price * quantity for variant, quantity in priced_lines), start=0)
        offers = shipping_offers_for(
            rules.methods,
            country=shipping_country,
            weight_grams=order_weight_grams(priced_lines),
            items_amount=items_amount,
        )
        if shipping_method is None and offers:
            shipping_method = offers[0].id
    price = order_price(
        priced_lines, to=Destination(shipping_country, billing_country, shipping_method), rules=rules, voucher=terms
    )
    return Quote(skus=skus, lines=priced_lines, ships=ships, shipping_offers=offers, price=price)


def _voucher_terms(code: str, *, variants, lines, now, buyer: str | None) -> VoucherTerms:
    """The voucher of ``code`` if it applies to these lines now, else ``VoucherInvalid`` with the reason."""
    code = voucher_code_normal(code)
    read = order_voucher_read(codes=[code], skus=list(variants), buyers=[buyer] if buyer else [])
    return order_voucher_check(
        read,
        code,
        buyer=buyer,
        now=now,
        lines=[(variants[line.sku].pk, variants[line.sku].price * line.quantity) for line in lines],
    )
