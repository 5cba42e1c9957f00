"""The orders' domain errors: orders that cannot be placed, paid, cancelled or found, and keys misused."""

from http import HTTPStatus

from core.errors import DomainError


class IdempotencyConflict(DomainError):
    """``number``: the order the key placed, from a request with other lines (on the web: a changed cart)."""

    code = "idempotency_conflict"
    # IETF draft "The Idempotency-Key HTTP Header Field": a key reused with another payload is 422.
    status_code = HTTPStatus.UNPROCESSABLE_ENTITY
    default_detail = "This idempotency key was already used for a different order."

    def explain(self) -> str:
        return (
            f"Your earlier submit placed order {self.payload['number']} before your cart changed; "
            "nothing more was placed. Check that order under My orders before ordering again."
        )


class OrderNotPayable(DomainError):
    code = "order_not_payable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This order can no longer be paid."


class OrderExpired(DomainError):
    """Paying an expired order whose lines can no longer be reserved again."""

    code = "order_expired"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The reservation expired and the stock is no longer available."


class OrderNotCancellable(DomainError):
    code = "order_not_cancellable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A paid order cannot be cancelled."


class OrderNotFound(DomainError):
    code = "order_not_found"
    status_code = HTTPStatus.NOT_FOUND
    default_detail = "No such order."


class IdempotencyKeyRequired(DomainError):
    code = "idempotency_key_required"
    default_detail = "Send an Idempotency-Key header (1 to 64 characters) so the request can be retried safely."


class LimitExceeded(DomainError):
    """``sku``, its ``limit`` per customer, the units the customer ``held`` and how many more are ``allowed``."""

    code = "limit_exceeded"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This order would take more units of a product than one customer may hold."

    def explain(self) -> str:
        payload = self.payload
        return (
            f"You may hold at most {payload['limit']} of {payload['sku']} (you hold {payload['held']}); "
            f"you can order {payload['allowed']} more."
        )


class TooManyOpenOrders(DomainError):
    """A guest's browser or address already has ``limit`` unpaid orders."""

    code = "too_many_open_orders"
    status_code = HTTPStatus.CONFLICT
    default_detail = "There are too many unpaid orders from here; pay or cancel one first."


class OrderLinkExpired(DomainError):
    """An emailed order link past ``ORDER_LINK_MAX_AGE_SECONDS``: it shows nothing of the order any more."""

    code = "order_link_expired"
    status_code = HTTPStatus.GONE
    default_detail = (
        "This order link has expired. Open the order from the browser you placed it with, "
        "or log in if you ordered with an account."
    )
