"""Stripe Checkout, through Stripe's official ``stripe`` library: a hosted payment page per payment, and
``checkout.session.*`` and ``charge.refunded`` webhooks that tell the outcome. ``STRIPE_API_BASE``
points the library elsewhere (tests use a fake); ``STRIPE_WEBHOOK_SECRET`` verifies the webhooks."""

import hmac
import logging
import math
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import stripe
from django.conf import settings
from django.utils import timezone

from payments.providers import (
    Checkout,
    EventUnreadable,
    Outcome,
    PaymentOutcome,
    WebhookRefused,
    amount_in_minor_units,
    payment_metadata,
    webhook_event,
)

logger = logging.getLogger(__name__)


# Stripe keeps a checkout session open at least this long and at most this long after it is created.
SESSION_MIN_LIFE = timedelta(minutes=31)  # Stripe's minimum is 30 minutes; a minute for the clocks
SESSION_MAX_LIFE = timedelta(hours=24)
SESSION_ROUNDING = timedelta(minutes=10)

EVENT_OUTCOMES = {
    "checkout.session.completed": Outcome.SUCCEEDED,  # only with payment_status "paid"
    "checkout.session.async_payment_succeeded": Outcome.SUCCEEDED,
    "checkout.session.async_payment_failed": Outcome.FAILED,
    "checkout.session.expired": Outcome.CLOSED,
    "charge.refunded": Outcome.REFUNDED,
}


# Stripe's "Supported currencies": those without a minor unit, those with three decimals (charged only with a
# last digit of 0), and ISK, two decimals on Stripe's wire but charged in whole krónur only.
ZERO_DECIMAL_CURRENCIES = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split())
THREE_DECIMAL_CURRENCIES = frozenset("BHD JOD KWD OMR TND".split())
WHOLE_UNITS_ONLY = frozenset({"ISK"})


def _exponent(currency: str) -> int:
    """Digits of Stripe's minor unit of ``currency`` (amounts go to Stripe in it)."""
    currency = currency.upper()
    return 0 if currency in ZERO_DECIMAL_CURRENCIES else 3 if currency in THREE_DECIMAL_CURRENCIES else 2


def currency_places(currency: str) -> int:
    """The decimal places of an amount in ``currency`` that Stripe charges exactly."""
    currency = currency.upper()
    return 0 if currency in ZERO_DECIMAL_CURRENCIES or currency in WHOLE_UNITS_ONLY else 2


def minor_units(amount: Decimal, currency: str) -> int:
    """``amount`` in Stripe's minor unit of ``currency``; ``AmountNotChargeable`` if Stripe cannot charge it exactly."""
    return amount_in_minor_units(amount, currency, places=currency_places(currency), exponent=_exponent(currency))


def major_units(minor: int, currency: str) -> Decimal:
    """A Stripe amount in ``currency``'s minor unit, back in its major unit."""
    return Decimal(minor).scaleb(-_exponent(currency))


def _session_expiry(payable_until: datetime) -> datetime:
    """When the session closes: at ``payable_until`` if Stripe allows it, else as near as it allows,
    rounded up to SESSION_ROUNDING so that a second click within it sends the same parameters under
    the same idempotency key (Stripe refuses a reused key with other parameters)."""
    now = timezone.now()
    earliest = now + SESSION_MIN_LIFE
    if payable_until >= earliest:
        return min(payable_until, now + SESSION_MAX_LIFE - SESSION_ROUNDING)
    step = SESSION_ROUNDING.total_seconds()
    return datetime.fromtimestamp(math.ceil(earliest.timestamp() / step) * step, tz=UTC)


def webhook_sign(payload: bytes, *, secret: str, timestamp: int | None = None) -> str:
    """The ``Stripe-Signature`` header for ``payload``, computed as Stripe documents it (HMAC-SHA256 of
    ``<timestamp>.<payload>``); the library only verifies signatures, it does not make them."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    signature = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, "sha256").hexdigest()
    return f"t={timestamp},v1={signature}"


def webhook_event_verify(payload: bytes, signature: str, *, secret: str | None = None) -> dict:
    """The event a webhook carries, once its signature by ``secret`` (default ``STRIPE_WEBHOOK_SECRET``)
    checks out (the library's check, within its tolerance of five minutes against replays).
    ``WebhookRefused`` otherwise."""
    try:
        stripe.Webhook.construct_event(payload, signature, secret or settings.STRIPE_WEBHOOK_SECRET)
    except (stripe.SignatureVerificationError, ValueError) as exc:
        raise WebhookRefused(str(exc)) from exc
    return webhook_event(payload)


def event_outcome(event: dict) -> PaymentOutcome | None:
    """What a Stripe event says about a payment of ours, in the shop's terms; None if it says nothing."""
    kind = EVENT_OUTCOMES.get(event.get("type"))
    obj = (event.get("data") or {}).get("object")
    if kind is None or not isinstance(obj, dict):
        return None
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    attempt = str(metadata.get("attempt", ""))
    found = {
        "order_number": str(metadata.get("order_number", "")),
        "attempt": int(attempt) if attempt.isdigit() else None,
        "provider_payment": obj.get("payment_intent") if isinstance(obj.get("payment_intent"), str) else "",
    }
    if obj.get("object") == "checkout.session" and isinstance(obj.get("id"), str):
        if event["type"] == "checkout.session.completed" and obj.get("payment_status") != "paid":
            return None  # a delayed method: async_payment_* tells the outcome
        currency = obj.get("currency") if isinstance(obj.get("currency"), str) else ""
        total = obj.get("amount_total")
        amount = major_units(total, currency) if isinstance(total, int) and currency else None
        return PaymentOutcome(kind, checkout=obj["id"], amount=amount, currency=currency.upper(), **found)
    if obj.get("object") == "charge" and kind == Outcome.REFUNDED:
        currency = obj.get("currency").upper() if isinstance(obj.get("currency"), str) else ""
        if obj.get("refunded") is True:  # all of it
            return PaymentOutcome(kind, currency=currency, **found)
        refunded = obj.get("amount_refunded")
        if not currency or not isinstance(refunded, int) or isinstance(refunded, bool) or refunded < 0:
            # Read in a guessed currency, an amount could be off a hundredfold: kept for staff instead.
            raise EventUnreadable("a charge.refunded whose amount_refunded or currency is missing or malformed")
        return PaymentOutcome(kind, refunded=major_units(refunded, currency), currency=currency, **found)
    return None


class StripeProvider:
    name = "stripe"
    currency_places = staticmethod(currency_places)

    @staticmethod
    def production_problems(settings) -> list[str]:
        problems = []
        if not settings.STRIPE_SECRET_KEY:
            problems.append("Set STRIPE_SECRET_KEY: the Stripe provider needs it to start payments")
        if settings.STRIPE_WEBHOOK_SECRET == settings.LOCAL_STRIPE_WEBHOOK_SECRET:
            problems.append(
                "Set STRIPE_WEBHOOK_SECRET to the webhook endpoint's signing secret (whsec_...): the development "
                "default is public, so anyone could forge a payment's webhook with it."
            )
        return problems

    def _client(self) -> stripe.StripeClient:
        return stripe.StripeClient(
            settings.STRIPE_SECRET_KEY,
            base_addresses={"api": settings.STRIPE_API_BASE},
            max_network_retries=2,  # with the idempotency keys below, a retried request is never doubled
        )

    def checkout_start(
        self, *, order, attempt: int, amount: Decimal, currency: str, return_url: str, payable_until: datetime
    ) -> Checkout:
        metadata = payment_metadata(order, attempt)
        expires_at = _session_expiry(payable_until)
        session = self._client().v1.checkout.sessions.create(
            params={
                "mode": "payment",
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": currency.lower(),
                            "unit_amount": minor_units(amount, currency),
                            "product_data": {"name": f"Order {order.number}"},
                        },
                    }
                ],
                "success_url": return_url,
                "cancel_url": return_url,
                "client_reference_id": order.number,
                "customer_email": order.email or None,
                "expires_at": int(expires_at.timestamp()),
                "metadata": metadata,
                "payment_intent_data": {"metadata": metadata},
            },
            options={"idempotency_key": f"checkout-{order.number}-{attempt}"},
        )
        return Checkout(reference=session.id, redirect_url=session.url)

    def checkout_expire(self, *, payment) -> bool:
        try:
            session = self._client().v1.checkout.sessions.expire(
                payment.reference, options={"idempotency_key": f"expire-{payment.reference}"}
            )
        except stripe.InvalidRequestError as exc:  # completed or expired already: its webhook tells which
            logger.info("checkout %s not expired: %s", payment.reference, exc.user_message or exc)
            return False
        return session.status == "expired"

    def refund(self, *, payment, amount: Decimal | None = None, key: str = "") -> None:
        params = {
            "payment_intent": payment.provider_payment,
            "metadata": payment_metadata(payment.order, payment.attempt),
        }
        if amount is not None:
            params["amount"] = minor_units(amount, payment.currency)
        try:
            self._client().v1.refunds.create(
                params=params, options={"idempotency_key": key or f"refund-{payment.reference}"}
            )
        except stripe.InvalidRequestError as exc:
            if exc.code != "charge_already_refunded":  # refunded in the dashboard: its webhook is on its way
                raise

    def webhook_verify(self, payload: bytes, headers) -> dict:
        return webhook_event_verify(payload, headers.get("Stripe-Signature", ""))

    def event_outcome(self, event: dict) -> PaymentOutcome | None:
        return event_outcome(event)
