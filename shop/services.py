"""Changing the catalog: a product's terms of sale."""

from datetime import datetime

from django.utils import timezone

from shop.models import Product

_UNSET = object()


def product_sale_terms_set(*, product: Product, max_per_customer=_UNSET, sale_starts_at=_UNSET) -> Product:
    """Set a product's limit per customer and sale start (None clears either); what is not given stays.

    Orders read them under the SKU's lock, so a change applies to every order decided after it.
    """
    changes: dict[str, int | datetime | None] = {}
    if max_per_customer is not _UNSET:
        changes["max_per_customer"] = max_per_customer
    if sale_starts_at is not _UNSET:
        changes["sale_starts_at"] = sale_starts_at
    if changes:
        Product.objects.filter(pk=product.pk).update(**changes, updated_at=timezone.now())
    return Product.objects.get(pk=product.pk)
