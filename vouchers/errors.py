"""The vouchers' domain error: a code that does not apply, with the reason why."""

from http import HTTPStatus

from django.conf import settings

from core.errors import DomainError
from core.money import money_format


class VoucherInvalid(DomainError):
    """``code``: the code given; ``reason``: one of ``REASONS`` (``minimum_not_met`` adds the ``minimum`` and
    its ``currency``). Nothing was placed."""

    code = "voucher_invalid"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This voucher cannot be used for this order."
    # Every reason, in the order they are checked (``unknown``, then ``vouchers.rules.RULES``), and what the
    # buyer is told: the one list. The API schema is made from it; tests/test_docs.py holds the README to it.
    REASONS = {
        "unknown": "There is no such voucher.",
        "not_started": "This voucher is not valid yet.",
        "expired": "This voucher has expired.",
        "used_up": "This voucher has been used up.",
        "limit_per_customer": "You have used this voucher as often as it allows.",
        "minimum_not_met": "Your order does not reach this voucher's minimum of {minimum}.",
        "not_applicable": "This voucher does not apply to anything in your order.",
    }

    def __init__(self, *, voucher: str, reason: str, **payload):
        detail = self.REASONS[reason]
        if reason == "minimum_not_met":  # the amount to reach, in the shop's currency
            payload["currency"] = settings.SHOP_CURRENCY
            detail = detail.format(minimum=money_format(payload["minimum"], payload["currency"]))
        super().__init__(detail, voucher=voucher, reason=reason, **payload)

    def explain(self) -> str:
        return f"{self.payload['voucher']}: {self.detail}"
