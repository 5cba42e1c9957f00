from collections.abc import Iterable
from decimal import Decimal
from typing import NamedTuple

from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce

from core.db import select_in
from core.errors import InvalidInput
from shop.errors import ProductUnavailable, UnknownProduct
from shop.models import Product, sku_normalise


class OrderableProduct(NamedTuple):
    """What placing an order needs of a product: its id and its price now."""

    pk: int
    price: Decimal


def product_map_orderable(*, skus: Iterable[str]) -> dict[str, OrderableProduct]:
    """Products by SKU, refusing unknown SKUs and products that are inactive or deleted.

    Plain SQL: a lock holder calls this once per batch of orders, and building the query with the ORM
    costs more CPU than running it, time every queued buyer waits for.
    """
    skus = sorted(set(skus))
    price = Product._meta.get_field("price")
    rows = select_in(Product, "sku, id, price, is_active, is_deleted", sku=skus)
    found = {sku: OrderableProduct(pk, price.to_python(value)) for sku, pk, value, _, _ in rows}
    unknown = [sku for sku in skus if sku not in found]
    if unknown:
        raise UnknownProduct(skus=unknown)
    unavailable = [sku for sku, _, _, is_active, is_deleted in rows if not is_active or is_deleted]
    if unavailable:
        raise ProductUnavailable(skus=sorted(unavailable))
    return found


def product_get_for_stock(*, sku: str) -> Product:
    """A product staff may restock or adjust: any that is not deleted, active or not."""
    try:
        return Product.objects.get(sku=sku)
    except Product.DoesNotExist:
        raise UnknownProduct(skus=[sku]) from None


def product_list_for_catalog(
    *, sku: str | None = None, search: str | None = None, in_stock: bool | None = None, ordering: str = "sku"
) -> QuerySet[Product]:
    """Products for sale with their stock counters (``available`` annotated), filtered and ordered."""
    products = (
        Product.objects.filter(is_active=True)
        .select_related("stock")
        .annotate(available=Coalesce(F("stock__on_hand") - F("stock__reserved"), 0))
    )
    if sku:
        products = products.filter(sku=sku_normalise(sku))
    if search:
        products = products.filter(name__icontains=search)
    if in_stock is not None:
        products = products.filter(available__gt=0) if in_stock else products.filter(available__lte=0)
    return products.order_by(ordering, "sku")


def product_find_for_catalog(*, sku: str) -> Product | None:
    """The product for sale with this SKU (in any case); None for a SKU no product has."""
    try:
        sku = sku_normalise(sku)
    except InvalidInput:
        return None  # no product could have it
    return product_list_for_catalog().filter(sku=sku).first()
