"""Typed domain errors. Each carries a stable machine-readable ``code`` and a payload.

Views, the API's exception handler and commands turn them into responses; they never need to parse
messages.
"""


class DomainError(Exception):
    code = "domain_error"
    default_detail = "The request could not be carried out."

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


class InvalidInput(DomainError):
    """Malformed lines: wrong types, bad quantity, duplicates. ``fields`` says what is wrong."""

    code = "invalid_input"
    default_detail = "The request is not valid."


class InvalidQuantity(InvalidInput):
    code = "invalid_quantity"
    default_detail = "Quantity must be a whole number in the allowed range."


class DuplicateLine(InvalidInput):
    code = "duplicate_line"
    default_detail = "Each SKU may appear only once per order."


class UnknownProduct(DomainError):
    code = "unknown_sku"
    default_detail = "No product has this SKU."


class ProductUnavailable(DomainError):
    code = "product_unavailable"
    default_detail = "This product is not for sale."


class InsufficientStock(DomainError):
    """``shortages``: one ``{"sku", "requested", "available"}`` per line that cannot be served."""

    code = "insufficient_stock"
    default_detail = "Not enough stock for every line; nothing was reserved."


class StaleStock(DomainError):
    code = "stale_version"
    default_detail = "The stock changed since it was read; reload and try again."


class BelowReserved(DomainError):
    code = "below_reserved"
    default_detail = "On-hand stock cannot go below the units reserved for open orders."


class LockTimeout(DomainError):
    """Nothing changed, unless ``outcome`` is ``"unknown"``: then the request may have been carried out."""

    code = "lock_timeout"
    default_detail = "The stock is busy; please retry shortly."

    @classmethod
    def outcome_unknown(cls, **payload) -> "LockTimeout":
        """A lock holder took the request and no answer came: it may have committed, or not yet."""
        return cls(
            "The stock is busy and the outcome of this request is unknown; retry with the same idempotency key.",
            outcome="unknown",
            **payload,
        )


class LockUnavailable(DomainError):
    code = "lock_unavailable"
    default_detail = "The lock service is unreachable; no stock was changed."


class LedgerInconsistent(DomainError):
    code = "ledger_inconsistent"
    default_detail = "The ledger sums break a stock invariant; this needs a person, not a rebuild."


class StockInvariantBroken(RuntimeError):
    """The counters disagree with the reservations: reconcile. Never expected; rolls back."""
