"""The base of every domain error, and the generic refusals of malformed input.

Each error class carries what every caller needs to answer it, as DRF's ``APIException`` does: a stable
machine-readable ``code``, its HTTP ``status_code``, the ``default_detail`` a person reads, and whether
it is ``transient``. An instance carries a payload. The API's exception handler and the pages read these
attributes and ``explain()``; no table of codes lives anywhere else, and nobody parses messages. The
errors of one domain live in its app (``shop.errors``, ``inventory.errors``, ``orders.errors``).
"""

from http import HTTPStatus


class DomainError(Exception):
    code = "domain_error"
    status_code = HTTPStatus.BAD_REQUEST
    default_detail = "The request could not be carried out."
    # A refusal for now, not for good (a busy or unreachable lock, a lost database connection): the same
    # request, retried, may be carried out, and with the same idempotency key it is carried out once.
    transient = False

    def __init__(self, detail: str | None = None, **payload):
        self.detail = detail or self.default_detail
        self.payload = payload
        super().__init__(self.detail)

    def as_dict(self) -> dict:
        return {"code": self.code, "detail": self.detail, **self.payload}

    def as_text(self) -> str:
        """One line for operators: code, detail and payload."""
        details = ", ".join(f"{key}={value}" for key, value in self.payload.items())
        return f"{self.code}: {self.detail}" + (f" ({details})" if details else "")

    def explain(self) -> str:
        """What a page tells the buyer: the detail, naming the SKUs it is about. Errors whose payload says
        more (a limit, an opening time) override this; the API answers ``detail`` and the payload."""
        skus = self.payload.get("skus")
        return f"{self.detail} ({', '.join(skus)})" if skus else self.detail


class InvalidInput(DomainError):
    """Malformed input: wrong types, bad quantity, duplicates. ``fields`` says what is wrong."""

    code = "invalid_input"
    default_detail = "The request is not valid."


class InvalidQuantity(InvalidInput):
    code = "invalid_quantity"
    default_detail = "Quantity must be a whole number in the allowed range."


class DatabaseUnavailable(DomainError):
    """The database connection was lost (a restart, a failover): what the request did was rolled back, or
    committed just before the answer was lost, so it is retried with the same idempotency key."""

    code = "database_unavailable"
    status_code = HTTPStatus.SERVICE_UNAVAILABLE
    transient = True
    default_detail = "The database connection failed. Retry with the same Idempotency-Key."
