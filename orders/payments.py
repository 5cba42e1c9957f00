"""A small pluggable payment gateway. ``settings.PAYMENT_GATEWAY`` names the class to use."""

import secrets
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class PaymentResult:
    succeeded: bool
    reference: str = ""
    message: str = ""


class PaymentGateway(Protocol):
    def charge(self, *, order, amount, token: str) -> PaymentResult: ...

    def refund(self, *, order, reference: str) -> None:
        """Undo a charge whose order could not be marked paid."""


class SimulatedGateway:
    """Approves every charge except the token ``"decline"`` (how tests and demos make payments fail)."""

    DECLINE_TOKEN = "decline"

    def charge(self, *, order, amount, token: str) -> PaymentResult:
        if token == self.DECLINE_TOKEN:
            return PaymentResult(succeeded=False, message="Card declined (simulated).")
        return PaymentResult(succeeded=True, reference=f"sim_{secrets.token_hex(8)}")

    def refund(self, *, order, reference: str) -> None:
        return None


def payment_gateway() -> PaymentGateway:
    return import_string(settings.PAYMENT_GATEWAY)()
