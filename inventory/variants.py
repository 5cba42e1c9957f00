"""Variants with their stock. The catalog knows nothing of stock, so a variant is created here.

Every variant has a Stock row from the start (the stock services, the admin and the books count on
it); its initial stock arrives through the stock service, so the ledger has it.
"""

import itertools
from decimal import Decimal

from django.db import transaction

from core.errors import InvalidInput
from inventory.models import Stock
from inventory.services import stock_restock
from shop.models import OptionValue, Product, ProductVariant, sku_normalise


def variant_create(
    *,
    sku: str,
    name: str,
    price: Decimal,
    product: Product | None = None,
    description: str = "",
    option_values=(),
    is_active: bool = True,
    max_per_customer: int | None = None,
    sale_starts_at=None,
    initial_stock: int = 0,
    requires_shipping: bool = True,
    weight_grams: int | None = None,
    tax_class=None,
    actor=None,
) -> ProductVariant:
    """Create a variant of ``product`` with its Stock row; without a product, a new product of this name and
    ``description``, sold in this one variant. Initial stock arrives through the inventory service (ledgered).
    """
    variant = ProductVariant(
        product=product,
        sku=sku,
        name=name,
        price=Decimal(price),
        is_active=is_active,
        max_per_customer=max_per_customer,
        sale_starts_at=sale_starts_at,
        requires_shipping=requires_shipping,
        weight_grams=weight_grams,
        tax_class=tax_class,
    )
    variant.full_clean(exclude=["product"])
    with transaction.atomic():
        if product is None:
            variant.product = Product.objects.create(name=name, description=description)
        variant.save()
        variant.option_values.set(option_values)
        Stock.objects.create(variant=variant)
    if initial_stock:
        stock_restock(sku=sku, quantity=initial_stock, reason="initial stock", actor=actor)
    return variant


def product_variants_generate(
    *, product: Product, values: list[OptionValue], price: Decimal, initial_stock: int = 0, actor=None
) -> list[ProductVariant]:
    """Create ``product``'s variants for every combination of the chosen option values (every size times
    every colour), skipping combinations it has already. Each SKU is the product's name spelt as a SKU with
    the values by option name (``AIR-MAX-BLACK-42``), each name the product's with them (``Air Max, Black / 42``).
    """
    by_option: dict[int, list[OptionValue]] = {}
    for value in sorted(values, key=lambda v: (v.option.name, v.position, v.value)):
        by_option.setdefault(value.option_id, []).append(value)
    if not by_option:
        raise InvalidInput(fields={"values": "Choose at least one value."})
    existing = {
        frozenset(variant.option_values.values_list("pk", flat=True))
        for variant in ProductVariant.all_objects.filter(product=product)
    }
    stem = _sku_stem(product)
    created = []
    for combination in itertools.product(*by_option.values()):
        if frozenset(value.pk for value in combination) in existing:
            continue
        words = [value.value for value in combination]
        created.append(
            variant_create(
                product=product,
                sku=sku_normalise("-".join([stem, *words]).replace(" ", "-")),
                name=f"{product.name}, {' / '.join(words)}",
                price=price,
                option_values=combination,
                initial_stock=initial_stock,
                actor=actor,
            )
        )
    return created


def _sku_stem(product: Product) -> str:
    return "".join(c if c.isalnum() else "-" for c in product.name.upper()).strip("-")[:40] or f"P{product.pk}"
