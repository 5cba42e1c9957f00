"""Errors of paying and refunding, each with its HTTP status and a message for the buyer or staff."""

from http import HTTPStatus

from core.errors import DomainError


class OrderNotRefundable(DomainError):
    code = "order_not_refundable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only a paid order can be refunded."


class PaymentNotApplied(DomainError):
    code = "payment_not_applied"
    status_code = HTTPStatus.CONFLICT
    default_detail = "The charge was refunded before it could be applied to the order; pay again."


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


class RefundExceedsOrder(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to refund; ``shipping``: true if
    the shipping was asked for and is refunded already."""

    code = "refund_exceeds_order"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A refund cannot give back more of a line, or of the shipping, than is left to refund."


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
