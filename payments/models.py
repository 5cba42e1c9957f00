"""Payments of orders with their providers, the providers' webhook events, and refunds of paid orders.

The tables kept their rows when these models moved here from ``orders`` (``orders`` migration 0018).
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.models import BaseModel
from core.money import money_format
from orders.models import Order, OrderLine, OrderLineUnits, order_line_units_constraints


class Payment(BaseModel):
    """A payment of an order with its provider, recorded before the buyer is sent to pay.

    The provider's webhooks move it on (``orders.services.payment_event_process``): pending until the
    outcome arrives, then failed, or charged and at once applied (captured: the order turns paid in
    the same transaction), or refunded when the order can no longer be paid. Its state always says
    whether the money was applied, also when a commit's outcome was never heard: a charge is never
    refunded on a guess (``orders.services.payment_settle``), nor while the stock is only busy or
    unreachable. A charge of another amount or currency than asked waits in ``review`` for staff.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Started with the provider; outcome not yet known"
        FAILED = "failed", "Failed or declined"
        CHARGED = "charged", "Charged, not yet applied"
        CAPTURED = "captured", "Applied: the order is paid with it"
        REFUNDING = "refunding", "Being refunded"
        REFUNDED = "refunded", "Refunded"
        REVIEW = "review", "Charged another amount or currency than asked: left for staff"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payments")
    provider = models.CharField(max_length=20)
    attempt = models.PositiveIntegerField(default=1)  # the order's n-th payment: the provider's idempotency key
    reference = models.CharField(max_length=255, unique=True)  # the provider's checkout id
    redirect_url = models.CharField(max_length=2000, blank=True)  # where the buyer pays
    provider_payment = models.CharField(max_length=255, blank=True, db_index=True)  # what refunds name
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)  # ISO 4217, upper case: SHOP_CURRENCY when it started
    # What the provider charged, as its success said (null until then, or if it did not say): another
    # amount or currency than asked puts the payment in ``review``.
    charged_amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    charged_currency = models.CharField(max_length=3, blank=True)
    # What the provider says it has refunded of the charge so far (its ``charge.refunded`` webhooks, and its
    # answers to our refunds), in the currency charged.
    amount_refunded = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING, db_index=True)
    # When the provider's success was recorded, on the database's clock: an expired order whose charge
    # arrived within its payable window is revived for it however long a busy lock delays applying it.
    charged_at = models.DateTimeField(null=True, blank=True)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=~Q(reference=""), name="payment_reference_present"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="payment_amount_not_negative"),
            models.CheckConstraint(
                condition=Q(amount_refunded__gte=0)
                & (
                    Q(amount_refunded__lte=F("amount"))
                    | Q(charged_amount__isnull=False, amount_refunded__lte=F("charged_amount"))
                ),
                name="payment_refunded_within_charge",
            ),
            models.UniqueConstraint(fields=["order", "attempt"], name="payment_one_per_order_attempt"),
        ]

    def __str__(self):
        return self.reference

    @property
    def charge(self) -> Decimal:
        """What the provider took: as its success said, else as asked (``payment_list_refund_drift`` reads the same)."""
        return self.amount if self.charged_amount is None else self.charged_amount

    @property
    def excess(self) -> Decimal:
        """What it took beyond its order's total: never the order's money (refunded when staff accept it)."""
        return max(self.charge - self.amount, Decimal(0))


class PaymentEvent(BaseModel):
    """A provider's webhook event, stored once (its id is unique per provider) before it is processed by a task."""

    provider = models.CharField(max_length=20)
    event_id = models.CharField(max_length=255)
    type = models.CharField(max_length=100)
    payload = models.JSONField()
    processed_at = models.DateTimeField(null=True, blank=True, db_index=True)  # pruning finds the old ones by it

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["provider", "event_id"], name="payment_event_once_per_provider")]

    def __str__(self):
        return f"{self.type} {self.event_id}"


class Refund(BaseModel):
    """Money given back on a paid order: units of chosen lines and optionally the shipping, or an amount
    refunded at the provider (its dashboard) that the shop learnt of from a webhook.

    Claimed first (``requested``: the lines' and the order's refunded counts move in the same
    transaction), then asked of the provider, then ``succeeded`` (units restocked if staff asked) or
    ``failed`` (the claim is given back). ``payments.services.refunds`` says how.
    """

    class State(models.TextChoices):
        REQUESTED = "requested", "Asked of the provider, not yet confirmed"
        SUCCEEDED = "succeeded", "Refunded"
        FAILED = "failed", "Refused by the provider: nothing refunded"

    class Source(models.TextChoices):
        STAFF = "staff", "Staff"
        RETURN = "return", "An accepted return"
        PROVIDER = "provider", "Made at the provider (its dashboard)"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    state = models.CharField(max_length=20, choices=State.choices, default=State.REQUESTED, db_index=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.STAFF)
    amount = models.DecimalField(max_digits=12, decimal_places=2)  # lines and shipping, as paid
    shipping = models.DecimalField(max_digits=12, decimal_places=2, default=0)  # the shipping part of it
    restock = models.BooleanField(default=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # When its email went to the buyer (claimed before sending: ``fulfilment.emails``).
    emailed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        # The refunds check of ``reconcile`` reads the refunds changed since its last clean run by this.
        indexes = [models.Index(fields=["updated_at"], name="refund_updated")]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount__gte=0) & Q(shipping__gte=0) & Q(shipping__lte=F("amount")),
                name="refund_amounts_within_range",
            ),
        ]

    def __str__(self):
        amount = money_format(self.amount, self.order.currency)
        return f"Refund #{self.pk} of {amount} for order {self.order} ({self.state})"

    @property
    def idempotency_key(self) -> str:
        """What the provider is asked with: a repeated request for this refund refunds once."""
        return f"refund-{self.payment.reference}-{self.pk}"


class RefundLine(OrderLineUnits):
    refund = models.ForeignKey(Refund, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="refund_lines")
    amount = models.DecimalField(max_digits=12, decimal_places=2)  # those units' share of what the line paid
    # Of them, those put back on hand when the refund succeeds: a return's units, or those of a refund
    # with ``restock`` that were never shipped (``LineUnits.cancels``); a unit at the customer never is.
    quantity_restocked = models.PositiveIntegerField(default=0)

    class Meta(OrderLineUnits.Meta):
        constraints = [
            *order_line_units_constraints(parent="refund", name="refund_line", positive=Q(amount__gte=0)),
            models.CheckConstraint(
                condition=Q(quantity_restocked__lte=F("quantity")), name="refund_line_restocked_within_quantity"
            ),
        ]
