"""The catalog's domain errors: SKUs that name no product, or one that is not for sale (yet)."""

from core.errors import DomainError


class UnknownProduct(DomainError):
    code = "unknown_sku"
    default_detail = "No product has this SKU."


class ProductUnavailable(DomainError):
    code = "product_unavailable"
    default_detail = "This product is not for sale."


class SaleNotStarted(DomainError):
    """``sku`` and ``starts_at``: when the sale opens, on the database's clock."""

    code = "sale_not_started"
    default_detail = "The sale of this product has not started yet."
