from collections.abc import Iterable

from inventory.errors import ProductUnavailable, UnknownProduct
from shop.models import Product


def product_map_orderable(*, skus: Iterable[str]) -> dict[str, Product]:
    """Products by SKU, refusing unknown SKUs and products that are inactive or deleted."""
    skus = sorted(set(skus))
    found = {product.sku: product for product in Product.all_objects.filter(sku__in=skus)}
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


def product_list_for_catalog():
    """Orderable products with their stock counters, for the catalog."""
    return Product.objects.filter(is_active=True).select_related("stock").order_by("sku")
