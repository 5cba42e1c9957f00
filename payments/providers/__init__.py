"""Payment providers: where a buyer pays, and how the shop hears the outcome.

One module per provider (``stripe``, ``local``), each owning everything about it: starting a checkout,
refunding, expiring a checkout, verifying its webhooks, reading its events into the shop's own
``PaymentOutcome``, the places of each currency it charges (the shop rounds to them: ``core.money``) and
what production needs of its settings. The rest of the shop never reads a provider's object shapes.
``settings.PAYMENT_PROVIDERS`` names each provider's class; ``PAYMENT_PROVIDER`` is the one new checkouts
use, and a payment is always refunded or expired through the provider it was made with
(``provider_for(payment.provider)``).

A provider never says at checkout whether a payment succeeded: the shop learns that only from the
provider's signed webhooks (``/payments/<provider>/webhook/``), which
``payments.services.payment_event_receive`` stores once and a Celery task applies.
"""

import enum
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from payments.errors import AmountNotChargeable


@dataclass(frozen=True)
class Checkout:
    reference: str  # the provider's id of the checkout (a Stripe Checkout Session id)
    redirect_url: str  # where the buyer pays


class Outcome(enum.StrEnum):
    SUCCEEDED = "succeeded"  # the money was taken
    FAILED = "failed"  # declined: the order's payment failed
    CLOSED = "closed"  # the checkout expired unpaid: this payment is over, the order may be paid again
    REFUNDED = "refunded"  # some or all of the money went back (``PaymentOutcome.refunded`` says how much)


@dataclass(frozen=True)
class PaymentOutcome:
    """What a provider's event says about one of our payments, in the shop's terms.

    The payment is found by ``checkout``, else by the metadata the shop gave the provider (``order_number``
    and ``attempt``), else by ``provider_payment``. Amounts are in the currency's major unit (``Decimal``).
    """

    kind: Outcome
    checkout: str = ""
    order_number: str = ""
    attempt: int | None = None
    provider_payment: str = ""  # the provider's id of the money movement (Stripe: the payment intent)
    amount: Decimal | None = None  # SUCCEEDED: what was charged (None: the event does not say)
    currency: str = ""  # SUCCEEDED, REFUNDED: its ISO code, upper case
    refunded: Decimal | None = None  # REFUNDED: the total refunded so far (None: all of it)


class PaymentProvider(Protocol):
    name: str  # its key in PAYMENT_PROVIDERS, its payments' and its webhook path's: 20 characters at most

    @staticmethod
    def production_problems(settings) -> list[str]:
        """What is wrong for production with ``settings`` (``django.conf.settings``) when new checkouts use this
        provider, each said to the deployer: under ``config.settings_production`` every process refuses to
        start with any (``payments.apps``)."""

    @staticmethod
    def currency_places(currency: str) -> int:
        """The most decimal places of an amount in ``currency`` (ISO code, upper case) that this provider charges
        exactly. The shop rounds every amount it computes to them while new checkouts use this provider
        (``core.money.currency_places``, two at most), so it never computes a total it cannot charge."""

    def checkout_start(
        self, *, order, attempt: int, amount: Decimal, currency: str, return_url: str, payable_until: datetime
    ) -> Checkout:
        """A checkout for ``amount`` that stops taking payments at ``payable_until`` (or as close as the
        provider allows); the same order and attempt give the same checkout (idempotent).
        ``AmountNotChargeable`` if the provider cannot charge ``amount`` in ``currency`` exactly."""

    def checkout_expire(self, *, payment) -> bool:
        """Stop the payment's checkout taking money. Idempotent. True if it is closed now (else its
        webhook tells: closed, or paid just before)."""

    def refund(self, *, payment, amount: Decimal | None = None, key: str = "") -> None:
        """Refund ``amount`` of the payment (None: what is left of it); asked twice with the same ``key`` (by
        default one per payment), it refunds once. The provider's webhook tells what it refunded in all."""

    def webhook_verify(self, payload: bytes, headers) -> dict:
        """The event a webhook carries, once its signature checks out; ``WebhookRefused`` otherwise. The
        event has a string ``id``, unique for this provider, and a string ``type``."""

    def event_outcome(self, event: dict) -> PaymentOutcome | None:
        """What a verified event says about a payment; None for an event that is about none.
        ``EventUnreadable`` for one about a payment that does not say what it must (an amount without its
        currency): it is kept for staff, never taken as nothing."""


class WebhookRefused(ValueError):
    """A webhook whose signature is missing, wrong or stale, or whose body is not an event."""


class EventUnreadable(ValueError):
    """A verified event about a payment that lacks what the shop needs to apply it (say, a refunded amount
    without its currency, which would be read in the wrong unit)."""


class UnknownProvider(LookupError):
    """A provider name no entry of ``PAYMENT_PROVIDERS`` has."""


def amount_in_minor_units(amount: Decimal, currency: str, *, places: int, exponent: int) -> int:
    """``amount`` as a whole number of a provider's minor unit of ``currency`` (``10 ** -exponent`` of the major
    unit), if it has at most ``places`` decimals as the provider charges; ``AmountNotChargeable`` otherwise."""
    amount = Decimal(amount)
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise AmountNotChargeable(amount=str(amount), currency=currency.upper())
    return int(amount.scaleb(exponent))


def webhook_event(payload: bytes) -> dict:
    """The event a verified webhook's body holds: a JSON object with a string ``id`` and ``type``;
    ``WebhookRefused`` for anything else."""
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise WebhookRefused(str(exc)) from exc
    if not isinstance(event, dict) or not all(isinstance(event.get(key), str) for key in ("id", "type")):
        raise WebhookRefused("not an event")
    return event


def payment_metadata(order, attempt: int) -> dict[str, str]:
    """What every provider object of a payment carries, so its webhooks find the payment."""
    return {"order_number": order.number, "attempt": str(attempt)}


def provider_for(name: str) -> PaymentProvider:
    """The provider called ``name`` (a payment's ``provider``); ``UnknownProvider`` if none is configured."""
    try:
        path = settings.PAYMENT_PROVIDERS[name]
    except KeyError:
        raise UnknownProvider(name) from None
    return import_string(path)()


def payment_provider() -> PaymentProvider:
    """The provider new checkouts use (``PAYMENT_PROVIDER``)."""
    return provider_for(settings.PAYMENT_PROVIDER)
