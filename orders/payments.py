"""Payment providers: where a buyer pays, and how the shop hears the outcome.

A provider starts a checkout for an order (``checkout_start``: its reference and the page to send the
buyer to) and refunds a payment (``refund``). It never says whether a payment succeeded: the shop
learns that only from the provider's signed webhooks (``webhook_event_verify``), which
``orders.services.payment_event_receive`` stores once and a Celery task applies.

``settings.PAYMENT_PROVIDER`` names the class: ``StripeProvider`` (Stripe Checkout, through the official
``stripe`` library), or ``LocalProvider`` for development, demos and tests: a "pay / decline" page in
the shop itself that sends the same webhooks, signed the same way, to the same endpoint.
"""

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

import stripe
from celery import current_app
from django.conf import settings
from django.urls import reverse
from django.utils.module_loading import import_string

LOCAL_WEBHOOK_SEND = "orders.tasks.local_webhook_send"


@dataclass(frozen=True)
class Checkout:
    reference: str  # the provider's id of the checkout (a Stripe Checkout Session id)
    redirect_url: str  # where the buyer pays


class PaymentProvider(Protocol):
    name: str

    def checkout_start(self, *, order, attempt: int, amount: Decimal, return_url: str) -> Checkout:
        """A checkout for ``amount``; the same order and attempt give the same checkout (idempotent)."""

    def refund(self, *, payment) -> None:
        """Refund the whole payment; asked twice, it refunds once. The outcome arrives as a webhook."""


class WebhookRefused(ValueError):
    """A webhook whose signature is missing, wrong or stale, or whose body is not an event."""


def payment_metadata(order, attempt: int) -> dict[str, str]:
    """What every provider object of a payment carries, so its webhooks find the payment."""
    return {"order_number": order.number, "attempt": str(attempt)}


def _cents(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value())


class StripeProvider:
    """Stripe Checkout: a hosted payment page per order; ``checkout.session.*`` and ``charge.refunded``
    webhooks tell the outcome. ``STRIPE_API_BASE`` points the library elsewhere (tests use a fake)."""

    name = "stripe"

    def _client(self) -> stripe.StripeClient:
        return stripe.StripeClient(
            settings.STRIPE_SECRET_KEY,
            base_addresses={"api": settings.STRIPE_API_BASE},
            max_network_retries=2,  # with the idempotency keys below, a retried request is never doubled
        )

    def checkout_start(self, *, order, attempt: int, amount: Decimal, return_url: str) -> Checkout:
        metadata = payment_metadata(order, attempt)
        session = self._client().v1.checkout.sessions.create(
            params={
                "mode": "payment",
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": settings.SHOP_CURRENCY.lower(),
                            "unit_amount": _cents(amount),
                            "product_data": {"name": f"Order {order.number}"},
                        },
                    }
                ],
                "success_url": return_url,
                "cancel_url": return_url,
                "client_reference_id": order.number,
                "customer_email": order.email or None,
                "metadata": metadata,
                "payment_intent_data": {"metadata": metadata},
            },
            options={"idempotency_key": f"checkout-{order.number}-{attempt}"},
        )
        return Checkout(reference=session.id, redirect_url=session.url)

    def refund(self, *, payment) -> None:
        self._client().v1.refunds.create(
            params={"payment_intent": payment.provider_payment, "metadata": {"order_number": payment.order.number}},
            options={"idempotency_key": f"refund-{payment.reference}"},
        )


class LocalProvider:
    """A provider inside the shop, for development, demos and tests (production refuses it).

    Its checkout page (``orders.webhooks.local_checkout``) lets the buyer pay or decline; either way
    it sends Stripe's webhook for the outcome, signed with ``STRIPE_WEBHOOK_SECRET``, from a Celery
    task, so the outcome arrives late, as a real provider's does.
    """

    name = "local"

    def checkout_start(self, *, order, attempt: int, amount: Decimal, return_url: str) -> Checkout:
        # Derived, not random: the same order and attempt give the same checkout, as Stripe's idempotency keys do.
        digest = hmac.new(settings.SECRET_KEY.encode(), f"checkout:{order.number}:{attempt}".encode(), "sha256")
        reference = f"cs_local_{digest.hexdigest()[:24]}"
        return Checkout(reference=reference, redirect_url=reverse("local-checkout", args=[reference]))

    def refund(self, *, payment) -> None:
        self.webhook_send("charge.refunded", payment=payment)

    def webhook_send(self, event_type: str, *, payment) -> None:
        """Have a task send Stripe's ``event_type`` event about ``payment`` to ``LOCAL_PAYMENTS_WEBHOOK_URL``."""
        # Enqueued by name: orders.tasks imports this module.
        current_app.send_task(
            LOCAL_WEBHOOK_SEND, args=[local_event(event_type, payment=payment), settings.LOCAL_PAYMENTS_WEBHOOK_URL]
        )


def local_event(event_type: str, *, payment) -> dict:
    """A Stripe-shaped event about ``payment``, as the local provider sends it."""
    metadata = payment_metadata(payment.order, payment.attempt)
    payment_intent = payment.provider_payment or f"pi_local_{payment.reference.removeprefix('cs_local_')}"
    if event_type == "charge.refunded":
        obj = {"object": "charge", "id": f"ch_local_{payment.reference[9:]}", "payment_intent": payment_intent}
    else:
        paid = event_type == "checkout.session.completed"
        obj = {
            "object": "checkout.session",
            "id": payment.reference,
            "payment_intent": payment_intent,
            "payment_status": "paid" if paid else "unpaid",
            "metadata": metadata,
        }
    event_id = hashlib.sha256(f"{event_type}:{payment.reference}".encode()).hexdigest()[:24]
    return {"id": f"evt_local_{event_id}", "object": "event", "type": event_type, "data": {"object": obj}}


def webhook_sign(payload: bytes, *, secret: str, timestamp: int | None = None) -> str:
    """The ``Stripe-Signature`` header for ``payload``, computed as Stripe documents it (HMAC-SHA256 of
    ``<timestamp>.<payload>``); the library only verifies signatures, it does not make them."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    signature = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, "sha256").hexdigest()
    return f"t={timestamp},v1={signature}"


def webhook_event_verify(payload: bytes, signature: str) -> dict:
    """The event a webhook carries, once its signature checks out (the library's check, within its
    tolerance of five minutes against replays). ``WebhookRefused`` otherwise."""
    try:
        stripe.Webhook.construct_event(payload, signature, settings.STRIPE_WEBHOOK_SECRET)
        event = json.loads(payload)
    except (stripe.SignatureVerificationError, ValueError) as exc:
        raise WebhookRefused(str(exc)) from exc
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not isinstance(event.get("type"), str):
        raise WebhookRefused("not an event")
    return event


def payment_provider() -> PaymentProvider:
    return import_string(settings.PAYMENT_PROVIDER)()
