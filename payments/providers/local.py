"""A provider inside the shop, for development, demos and tests (production refuses it).

Its checkout page (``payments.webhooks.local_checkout``) lets the buyer pay or decline; either way it
sends the webhook for the outcome to its own endpoint, from a Celery task, so the outcome arrives late,
as a real provider's does. Its events are Stripe's, signed as Stripe signs them, so it exercises the
same paths a Stripe shop runs; the key is its own (``local_webhook_secret``), so Stripe's endpoint
never takes a local event for Stripe's, nor the local endpoint a Stripe event.
"""

import hashlib
import hmac
from datetime import datetime
from decimal import Decimal

from celery import current_app
from django.conf import settings
from django.db.models import Sum
from django.urls import reverse

from payments.models import Refund
from payments.providers import Checkout, PaymentOutcome, payment_metadata
from payments.providers.stripe import currency_places, event_outcome, minor_units, webhook_event_verify

LOCAL_WEBHOOK_SEND = "orders.tasks.local_webhook_send"
# The buyer's choice on the local checkout page, and the event each sends.
LOCAL_OUTCOMES = {"pay": "checkout.session.completed", "decline": "checkout.session.async_payment_failed"}


class LocalProvider:
    name = "local"
    currency_places = staticmethod(currency_places)  # Stripe's: it charges, and refuses, what Stripe would

    @staticmethod
    def production_problems(settings) -> list[str]:
        return ["the local provider takes no money: production refuses it (config.settings_production)"]

    def checkout_start(
        self, *, order, attempt: int, amount: Decimal, currency: str, return_url: str, payable_until: datetime
    ) -> Checkout:
        minor_units(amount, currency)  # refuses what Stripe would refuse
        # Derived, not random: the same order and attempt give the same checkout, as Stripe's idempotency keys do.
        digest = hmac.new(settings.SECRET_KEY.encode(), f"checkout:{order.number}:{attempt}".encode(), "sha256")
        reference = f"cs_local_{digest.hexdigest()[:24]}"
        return Checkout(reference=reference, redirect_url=reverse("local-checkout", args=[reference]))

    def checkout_expire(self, *, payment) -> bool:
        self.webhook_send("checkout.session.expired", payment=payment)
        return False  # its webhook tells

    def refund(self, *, payment, amount: Decimal | None = None, key: str = "") -> None:
        refunded = None
        if amount is not None:  # what Stripe would report: every refund asked of this payment so far
            asked = (
                Refund.objects.filter(payment=payment).exclude(state=Refund.State.FAILED).aggregate(sum=Sum("amount"))
            )
            refunded = min(payment.amount, max(asked["sum"] or 0, amount))
        self.webhook_send("charge.refunded", payment=payment, refunded=refunded)

    def webhook_verify(self, payload: bytes, headers) -> dict:
        return webhook_event_verify(payload, headers.get("Stripe-Signature", ""), secret=local_webhook_secret())

    def event_outcome(self, event: dict) -> PaymentOutcome | None:
        return event_outcome(event)

    def webhook_send(self, event_type: str, *, payment, refunded: Decimal | None = None) -> None:
        """Have a task send Stripe's ``event_type`` event about ``payment`` to ``LOCAL_PAYMENTS_WEBHOOK_URL``."""
        event = local_event(event_type, payment=payment, refunded=refunded)
        # Enqueued by name: orders.tasks imports this module.
        current_app.send_task(LOCAL_WEBHOOK_SEND, args=[event, settings.LOCAL_PAYMENTS_WEBHOOK_URL])


def local_webhook_secret() -> str:
    """The key the local provider signs its webhooks with: derived from ``STRIPE_WEBHOOK_SECRET``, and
    never equal to it."""
    key = hmac.new(settings.STRIPE_WEBHOOK_SECRET.encode(), b"local payment provider", hashlib.sha256)
    return f"whsec_local_{key.hexdigest()}"


def local_event(event_type: str, *, payment, refunded: Decimal | None = None) -> dict:
    """A Stripe-shaped event about ``payment``, as the local provider sends it; a ``charge.refunded`` says
    ``refunded`` went back so far (None: all of it)."""
    metadata = payment_metadata(payment.order, payment.attempt)
    payment_intent = payment.provider_payment or f"pi_local_{payment.reference.removeprefix('cs_local_')}"
    currency = payment.currency.lower()
    if event_type == "charge.refunded":
        amount = minor_units(payment.amount, payment.currency)
        so_far = amount if refunded is None else minor_units(refunded, payment.currency)
        obj = {
            "object": "charge",
            "id": f"ch_local_{payment.reference.removeprefix('cs_local_')}",
            "payment_intent": payment_intent,
            "amount": amount,
            "amount_refunded": so_far,
            "refunded": so_far == amount,
            "currency": currency,
            "metadata": metadata,
        }
    else:
        paid = event_type == "checkout.session.completed"
        obj = {
            "object": "checkout.session",
            "id": payment.reference,
            "payment_intent": payment_intent,
            "payment_status": "paid" if paid else "unpaid",
            "amount_total": minor_units(payment.amount, payment.currency),
            "currency": currency,
            "metadata": metadata,
        }
    event_id = hashlib.sha256(f"{event_type}:{payment.reference}:{refunded}".encode()).hexdigest()[:24]
    return {"id": f"evt_local_{event_id}", "object": "event", "type": event_type, "data": {"object": obj}}
