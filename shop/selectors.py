from collections.abc import Iterable

from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce

from inventory.errors import ProductUnavailable, UnknownProduct
from shop.models import Product


def product_map_orderable(*, skus: Iterable[str]) -> dict[str, Product]:
    """Products by SKU, refusing unknown SKUs and products that are inactive or deleted."""
    skus = sorted(set(skus))
    found = {product.sku: product for product in Product.all_objects.filter(sku__in=skus).order_by()}
    unknown = [sku for sku in skus if sku not in found]
    if unknown:
        raise UnknownProduct(skus=unknown)
    unavailable = [sku for sku in skus if not found[sku].is_orderable]
    if unavailable:
        raise ProductUnavailable(skus=unavailable)
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
        products = products.filter(sku=sku.strip().upper())
    if search:
        products = products.filter(name__icontains=search)
    if in_stock is not None:
        products = products.filter(available__gt=0) if in_stock else products.filter(available__lte=0)
    return products.order_by(ordering, "sku")


def product_find_for_catalog(*, sku: str) -> Product | None:
    return product_list_for_catalog().filter(sku=sku.strip().upper()).first()
