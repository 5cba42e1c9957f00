"""The history's SKUs, made unless they exist, with their figures at the shop's tax rates, and the
shipping method its orders take."""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction

from core.db import statements_run
from demo.history.text import cents
from inventory.models import Stock
from orders.pricing import tax_of
from shipping.models import ShippingMethod, ShippingZone
from shipping.selectors import shipping_methods_from_rows, shipping_offers_for
from shipping.sql import ShippingOffer, shipping_methods_statement
from shop.models import Product, ProductVariant
from tax.selectors import tax_rates_from_rows
from tax.sql import tax_rates_statement

SKU_PREFIX = "HIST-"  # the history's SKUs: HIST-000001 and on


@dataclass(frozen=True)
class Sku:
    """A SKU of the history, with its lines' figures by quantity (1 to 3): in cents, and as row text."""

    index: int
    stock_id: int
    ships: bool
    line_text: tuple[str, ...]  # variant_id, quantity, unit_price, line_total, tax_rate, tax
    units_text: tuple[str, ...]  # variant_id, quantity
    total: tuple[int, ...]
    tax: tuple[int, ...]


@dataclass(frozen=True)
class Catalog:
    skus: list[Sku]
    method: ShippingOffer  # what orders of shipped goods choose; its price is below ``free_above``
    shipping_rate: Decimal
    shipping_tax: dict[int, int]  # the tax of a shipping price (the method's, or free), in cents


def catalog_seed(count: int) -> Catalog:
    """The history's ``count`` SKUs (HIST-000001 on), each made with its product and stock row unless it
    exists, with their figures at the shop's tax rates; and the shipping method of its orders."""
    names = [f"{SKU_PREFIX}{n:06d}" for n in range(1, count + 1)]
    existing = set(ProductVariant.all_objects.filter(sku__startswith=SKU_PREFIX).values_list("sku", flat=True))
    new = [name for name in names if name not in existing]
    with transaction.atomic():
        products = Product.objects.bulk_create(
            [Product(name=f"History product {name.removeprefix(SKU_PREFIX)}") for name in new], batch_size=5000
        )
        ProductVariant.objects.bulk_create(
            [
                ProductVariant(product=product, sku=name, name=product.name, price=_price_of(name))
                for product, name in zip(products, new, strict=True)
            ],
            batch_size=5000,
        )
        stockless = ProductVariant.all_objects.filter(sku__in=names, stock__isnull=True)
        Stock.objects.bulk_create([Stock(variant=variant) for variant in stockless], batch_size=5000)
    country, included, currency = settings.SHOP_COUNTRY, settings.PRICES_INCLUDE_TAX, settings.SHOP_CURRENCY
    [rows] = statements_run(connection.alias, [tax_rates_statement(countries={country})])
    rates = tax_rates_from_rows(rows)
    variants = ProductVariant.all_objects.filter(sku__in=names).order_by("sku")
    skus = []
    for index, (variant_id, price, ships, tax_class_id, stock_id) in enumerate(
        variants.values_list("pk", "price", "requires_shipping", "tax_class_id", "stock")
    ):
        rate = rates.rate(country=country, tax_class_id=tax_class_id)
        totals = [price * quantity for quantity in range(4)]
        taxes = [tax_of(total, rate, included=included, currency=currency) for total in totals]
        skus.append(
            Sku(
                index=index,
                stock_id=stock_id,
                ships=ships,
                line_text=tuple(f"{variant_id}\t{n}\t{price}\t{totals[n]}\t{rate}\t{taxes[n]}" for n in range(4)),
                units_text=tuple(f"{variant_id}\t{n}" for n in range(4)),
                total=tuple(map(cents, totals)),
                tax=tuple(map(cents, taxes)),
            )
        )
    method = _shipping_method()
    shipping_rate = rates.rate(country=country, tax_class_id=None) if settings.SHIPPING_TAXED else Decimal(0)
    shipping_tax = {
        cents(price): cents(tax_of(price, shipping_rate, included=included, currency=currency))
        for price in (method.price, Decimal(0))
    }
    return Catalog(skus=skus, method=method, shipping_rate=shipping_rate, shipping_tax=shipping_tax)


def _price_of(sku: str) -> Decimal:
    """A price from 1.99 to 99.98, spread over the SKUs."""
    return Decimal(199 + int(sku.removeprefix(SKU_PREFIX)) * 7919 % 9800) / 100


def _shipping_method() -> ShippingOffer:
    """The cheapest method to the shop's country for the history's parcels (no weight), at its price below
    its ``free_above``; a zone of that country with a method is made if none goes there."""
    for _ in range(2):
        [rows] = statements_run(connection.alias, [shipping_methods_statement()])
        offers = shipping_offers_for(
            shipping_methods_from_rows(rows), country=settings.SHOP_COUNTRY, weight_grams=0, items_amount=Decimal(0)
        )
        if offers:
            return offers[0]
        zone = ShippingZone.objects.create(name="History", countries=[settings.SHOP_COUNTRY])
        ShippingMethod.objects.create(zone=zone, name="History post", price=Decimal("4.90"), free_above=Decimal(50))
    raise AssertionError("the method just made goes to the shop's country")
