"""The stock's domain errors: refused lines, shortages, stale edits, busy or unreachable locks."""

from http import HTTPStatus

from core.errors import DomainError, InvalidInput


class DuplicateLine(InvalidInput):
    code = "duplicate_line"
    default_detail = "Each SKU may appear only once per order."


class InsufficientStock(DomainError):
    """``shortages``: one ``{"sku", "requested", "available"}`` per line that cannot be served."""

    code = "insufficient_stock"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Not enough stock for every line; nothing was reserved."

    def explain(self) -> str:
        return "Not enough stock for some lines; nothing was reserved."  # the page marks which, per line


class StaleStock(DomainError):
    code = "stale_version"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The stock changed since it was read; reload and try again."


class BelowReserved(DomainError):
    code = "below_reserved"
    status_code = HTTPStatus.CONFLICT
    default_detail = "On-hand stock cannot go below the units reserved for open orders."


class LockTimeout(DomainError):
    """Nothing changed, unless ``outcome`` is ``"unknown"``: then the request may have been carried out."""

    code = "lock_timeout"
    status_code = HTTPStatus.SERVICE_UNAVAILABLE
    transient = True
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
    status_code = HTTPStatus.SERVICE_UNAVAILABLE
    transient = True
    default_detail = "The lock service is unreachable; no stock was changed."


class LedgerInconsistent(DomainError):
    code = "ledger_inconsistent"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The ledger sums break a stock invariant; this needs a person, not a rebuild."


class StockInvariantBroken(RuntimeError):
    """The counters disagree with the reservations: reconcile. Never expected; rolls back."""
