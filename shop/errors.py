"""The catalog's domain errors: SKUs that name no product, or one that is not for sale (yet)."""

from datetime import datetime
from http import HTTPStatus

from core.errors import DomainError
from core.moments import moment_format


class UnknownProduct(DomainError):
    code = "unknown_sku"
    default_detail = "No product has this SKU."


class ProductUnavailable(DomainError):
    code = "product_unavailable"
    default_detail = "This product is not for sale."


class SaleNotStarted(DomainError):
    """``sku`` and ``starts_at``: when the sale opens, on the database's clock."""

    code = "sale_not_started"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The sale of this product has not started yet."

    def explain(self) -> str:
        starts_at = moment_format(datetime.fromisoformat(self.payload["starts_at"]))
        return f"The sale of {self.payload['sku']} opens at {starts_at}."
