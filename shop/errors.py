"""The catalog's domain errors: SKUs that name no product, or one that is not for sale."""

from core.errors import DomainError


class UnknownProduct(DomainError):
    code = "unknown_sku"
    default_detail = "No product has this SKU."


class ProductUnavailable(DomainError):
    code = "product_unavailable"
    default_detail = "This product is not for sale."
