"""The vouchers' domain error: a code that does not apply, with the reason why."""

from http import HTTPStatus

from core.errors import DomainError


class VoucherInvalid(DomainError):
    """``code``: the code given; ``reason``: one of ``REASONS``. Nothing was placed."""

    code = "voucher_invalid"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This voucher cannot be used for this order."
    REASONS = {
        "unknown": "There is no such voucher.",
        "not_started": "This voucher is not valid yet.",
        "expired": "This voucher has expired.",
        "used_up": "This voucher has been used up.",
        "limit_per_customer": "You have used this voucher as often as it allows.",
        "minimum_not_met": "Your order does not reach this voucher's minimum.",
        "not_applicable": "This voucher does not apply to anything in your order.",
    }

    def __init__(self, *, voucher: str, reason: str, **payload):
        super().__init__(self.REASONS[reason], voucher=voucher, reason=reason, **payload)

    def explain(self) -> str:
        return f"{self.payload['voucher']}: {self.detail}"
