"""The orders' domain errors: orders that cannot be placed, paid, cancelled or refunded, and keys misused."""

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


class OrderNotRefundable(DomainError):
    code = "order_not_refundable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only a paid order can be refunded."


class OrderExpired(DomainError):
    """Paying an expired order whose lines can no longer be reserved again."""

    code = "order_expired"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The reservation expired and the stock is no longer available."


class PaymentNotApplied(DomainError):
    code = "payment_not_applied"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The charge was refunded before it could be applied to the order; pay again."


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


class AmountNotChargeable(DomainError):
    """``amount`` cannot be charged exactly in ``currency`` (a yen price with cents): refused before any charge."""

    code = "amount_not_chargeable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This amount cannot be charged in the shop's currency; the shop needs to fix its prices."


class RefundFailed(DomainError):
    """The provider refused to refund (``reason``): nothing was refunded and the order stays paid."""

    code = "refund_failed"
    status_code = HTTPStatus.BAD_GATEWAY
    default_detail = "The payment provider did not refund this order; nothing changed. See the log, then try again."


class OrderNotShippable(DomainError):
    code = "order_not_shippable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only a paid order not yet shipped in full can be shipped."


class ShipmentExceedsOrder(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to ship."""

    code = "shipment_exceeds_order"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A shipment cannot send more of a line than is left to ship."


class RefundExceedsOrder(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to refund; ``shipping``: true if
    the shipping was asked for and is refunded already."""

    code = "refund_exceeds_order"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A refund cannot give back more of a line, or of the shipping, than is left to refund."


class ReturnNotAllowed(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to return (shipped, not yet
    refunded nor asked back by an open return)."""

    code = "return_not_allowed"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only units that were shipped, and not yet refunded or asked back, can be returned."


class ReturnAlreadyDecided(DomainError):
    code = "return_already_decided"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This return was accepted or refused already."


class PaymentInReview(DomainError):
    """A charge of the order's waits in ``review`` (another amount or currency than asked): paying again could
    charge the buyer twice, so staff accept that charge or refund it first."""

    code = "payment_in_review"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A payment of this order is being checked by the shop; it cannot be paid again meanwhile."


class ChargeNotAcceptable(DomainError):
    """Staff asked to accept a charge that cannot pay its order as it is: not in review, in another currency,
    of an amount the provider did not say, or less than the order's total (``reason`` says which)."""

    code = "charge_not_acceptable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This charge cannot be accepted as the order's payment; refund it instead."


class PaymentNotInReview(DomainError):
    """Staff asked to decide about a charge that is not in ``review`` (decided already, say)."""

    code = "payment_not_in_review"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This payment is not waiting for staff: it was accepted or refunded already."
