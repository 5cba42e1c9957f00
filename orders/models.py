import secrets
from decimal import Decimal
from functools import cached_property

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.models import BaseModel
from core.money import money_format
from orders.units import LineUnits
from shipping.addresses import address_lines

# No 0/O/1/I: numbers get read out over the phone.
_NUMBER_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_order_number() -> str:
    # One read of the system's random source (secrets.choice makes one per character, and a lock
    # holder numbers every order of its batch); 256 is a multiple of the 32 letters, so none is favoured.
    return "".join(_NUMBER_ALPHABET[byte % len(_NUMBER_ALPHABET)] for byte in secrets.token_bytes(10))


class Order(BaseModel):
    class Status(models.TextChoices):
        AWAITING_PAYMENT = "awaiting_payment", "Awaiting payment"
        PAID = "paid", "Paid"
        PARTIALLY_SHIPPED = "partially_shipped", "Partially shipped"
        SHIPPED = "shipped", "Shipped"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"
        PAYMENT_FAILED = "payment_failed", "Payment failed"
        REFUNDED = "refunded", "Refunded"

    number = models.CharField(max_length=16, unique=True, default=new_order_number, editable=False)
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="orders"
    )
    email = models.EmailField(blank=True)
    # Who placed it, for the limits per customer: "user:<id>", or "email:<canonical address>" for a guest.
    buyer = models.CharField(max_length=300, editable=False, db_index=True)
    # The client's address as the throttles see it: a guest's unpaid orders are limited per address.
    client_address = models.CharField(max_length=100, blank=True, editable=False, db_index=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.AWAITING_PAYMENT, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    idempotency_key = models.CharField(max_length=64)
    # sha256 of the key: keys are compared exactly, whatever the column collation ("abc" is not "ABC").
    idempotency_key_hash = models.CharField(max_length=64, editable=False)
    # Whose key it is: "user:<id>" or "email:<address>", so guests' keys are unique too.
    idempotency_scope = models.CharField(max_length=300, editable=False)
    # Hash of the normalised lines: a replay with the same key must carry the same request.
    request_fingerprint = models.CharField(max_length=64, editable=False)
    paid_at = models.DateTimeField(null=True, blank=True)
    # Set by a sweeper that claimed this order (SELECT ... FOR UPDATE SKIP LOCKED); other sweepers skip
    # it until then, and take it over afterwards if that sweeper died.
    sweep_lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    payment_reference = models.CharField(max_length=64, blank=True)
    # Copies of the addresses as given (``shipping.addresses``): editing an address never changes an order.
    # No shipping address: nothing in the order is shipped. No billing address: the shipping address.
    shipping_address = models.JSONField(null=True, blank=True)
    billing_address = models.JSONField(null=True, blank=True)
    shipping_method = models.ForeignKey(
        "shipping.ShippingMethod", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    shipping_method_name = models.CharField(max_length=100, blank=True)  # as it was called when chosen
    # The totals as placed (``orders.pricing``), never recomputed: each is the sum of what the lines and
    # the shipping store. With prices including tax, the tax is part of the subtotal and the shipping;
    # without, it is added to them.
    currency = models.CharField(max_length=3)
    prices_include_tax = models.BooleanField()
    subtotal = models.DecimalField(max_digits=12, decimal_places=2)
    shipping_price = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    shipping_tax_rate = models.DecimalField(max_digits=6, decimal_places=3, default=0)
    shipping_tax = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    tax = models.DecimalField(max_digits=12, decimal_places=2)
    total = models.DecimalField(max_digits=12, decimal_places=2)
    # The voucher code applied (``vouchers``), and what it took off the subtotal (the lines' discounts).
    voucher_code = models.CharField(max_length=40, blank=True)
    discount = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    # What refunds took back so far (``orders.services.refunds``), claimed before the provider is asked:
    # two refunds never add up to more than was paid (a guarded UPDATE, and a CHECK behind it).
    amount_refunded = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    shipping_refunded = models.BooleanField(default=False)

    class Meta(BaseModel.Meta):
        ordering = ["-created_at", "-id"]
        permissions = [("refund_order", "Can refund a paid order"), ("ship_order", "Can ship a paid order")]
        # A customer's orders newest first ("my orders", the API's list and its count) read in index order,
        # the deleted ones skipped in the index: no filesort, and the count reads no row.
        # The refunds check of ``reconcile`` reads the orders changed since its last clean run by ``order_updated``.
        indexes = [
            models.Index(fields=["customer", "is_deleted", "created_at", "id"], name="order_customer_newest"),
            models.Index(fields=["updated_at"], name="order_updated"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(subtotal__gte=0)
                & Q(shipping_price__gte=0)
                & Q(shipping_tax__gte=0)
                & Q(tax__gte=F("shipping_tax"))
                & Q(discount__gte=0)
                & Q(discount__lte=F("subtotal")),
                name="order_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(prices_include_tax=True, total=F("subtotal") - F("discount") + F("shipping_price"))
                | Q(prices_include_tax=False, total=F("subtotal") - F("discount") + F("shipping_price") + F("tax")),
                name="order_total_adds_up",
            ),
            models.UniqueConstraint(
                fields=["idempotency_scope", "idempotency_key_hash"], name="order_idempotency_key_per_customer"
            ),
            models.CheckConstraint(condition=~Q(idempotency_key=""), name="order_idempotency_key_present"),
            models.CheckConstraint(
                condition=Q(amount_refunded__gte=0) & Q(amount_refunded__lte=F("total")),
                name="order_refunded_within_total",
            ),
        ]

    def __str__(self):
        return self.number

    @property
    def billing_address_or_shipping(self) -> dict | None:
        return self.billing_address or self.shipping_address

    @property
    def shipping_method_chosen(self) -> dict | None:
        """The method as chosen (its name and price then): None if nothing is shipped."""
        if not self.shipping_method_name:
            return None
        return {"id": self.shipping_method_id, "name": self.shipping_method_name, "price": self.shipping_price}

    @property
    def shipping_address_lines(self) -> list[str]:
        return address_lines(self.shipping_address)

    @property
    def billing_address_lines(self) -> list[str]:
        return address_lines(self.billing_address_or_shipping)

    @cached_property
    def skus(self) -> list[str]:
        """The SKUs to lock for this order (lines never change once placed)."""
        return sorted(line.variant.sku for line in self.lines_with_variants())

    @property
    def refunds_shown(self) -> list["Refund"]:
        """The refunds made or under way (not those the provider refused), oldest first; prefetched ones
        (``refunds__lines__order_line__variant``) cost no query."""
        return [refund for refund in self.refunds.all() if refund.state != Refund.State.FAILED]

    def lines_with_variants(self) -> list["OrderLine"]:
        """The lines with their products, by product id; prefetched ones (``lines__variant``) cost no query."""
        prefetched = getattr(self, "_prefetched_objects_cache", {}).get("lines")
        if prefetched is not None:  # read directly: a related manager per call costs a hot SKU's buyers
            return sorted(prefetched, key=lambda line: line.variant_id)
        return list(self.lines.select_related("variant").order_by("variant_id"))


# An order whose payment was applied: paid, and then shipped in part or in full (``orders.services.fulfilment``).
PAID_STATUSES = (Order.Status.PAID, Order.Status.PARTIALLY_SHIPPED, Order.Status.SHIPPED)


class OrderLine(BaseModel):
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="lines")
    variant = models.ForeignKey("shop.ProductVariant", on_delete=models.PROTECT, related_name="+")
    quantity = models.PositiveIntegerField()
    # Units sent in shipments so far: never more than ordered (a CHECK, and the shipment's guarded UPDATE).
    quantity_shipped = models.PositiveIntegerField(default=0)
    # Units refunded so far (or being refunded): never more than ordered, whichever refunds race.
    quantity_refunded = models.PositiveIntegerField(default=0)
    # Of those, units shipped that came back with an accepted return. ``units`` says what the four counts
    # leave to ship, return and refund (``orders.units``); ``reconcile`` reports a line that breaks its rule.
    quantity_returned = models.PositiveIntegerField(default=0)
    # Snapshot: a later price change must not change what the customer agreed to pay.
    unit_price = models.DecimalField(max_digits=12, decimal_places=2)
    line_total = models.DecimalField(max_digits=12, decimal_places=2)  # unit price x quantity
    # The tax of the line, rounded once (``orders.pricing``): part of its total if prices include tax.
    tax_rate = models.DecimalField(max_digits=6, decimal_places=3, default=0)
    tax = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    # The line's share of the order's voucher discount: its tax is on the line total less this.
    discount = models.DecimalField(max_digits=12, decimal_places=2, default=0)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "variant"], name="order_line_one_per_product"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="order_line_quantity_positive"),
            models.CheckConstraint(
                condition=Q(line_total=F("unit_price") * F("quantity")), name="order_line_total_is_price_times_quantity"
            ),
            models.CheckConstraint(condition=Q(tax__gte=0), name="order_line_tax_not_negative"),
            models.CheckConstraint(
                condition=Q(discount__gte=0) & Q(discount__lte=F("line_total")), name="order_line_discount_within_total"
            ),
            models.CheckConstraint(
                condition=Q(quantity_shipped__lte=F("quantity")), name="order_line_shipped_within_quantity"
            ),
            models.CheckConstraint(
                condition=Q(quantity_refunded__lte=F("quantity")), name="order_line_refunded_within_quantity"
            ),
        ]

    @property
    def quantity_left_to_refund(self) -> int:
        return self.quantity - self.quantity_refunded

    @property
    def units(self) -> LineUnits:
        return LineUnits(
            ordered=self.quantity,
            shipped=self.quantity_shipped,
            refunded=self.quantity_refunded,
            returned=self.quantity_returned,
        )

    def __str__(self):
        return f"{self.quantity} x {self.variant_id}"


class Shipment(BaseModel):
    """Units of a paid order's lines sent together, with the carrier and tracking number staff gave."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="shipments")
    carrier = models.CharField(max_length=100)
    tracking_number = models.CharField(max_length=100, blank=True)
    tracking_url = models.URLField(max_length=500, blank=True)
    shipped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # When its email went to the buyer (claimed before sending: ``orders.services.emails``).
    emailed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["id"]

    def __str__(self):
        return f"{self.carrier} {self.tracking_number}".strip()


class ShipmentLine(BaseModel):
    shipment = models.ForeignKey(Shipment, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="shipment_lines")
    quantity = models.PositiveIntegerField()

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="shipment_line_quantity_positive"),
            models.UniqueConstraint(fields=["shipment", "order_line"], name="shipment_line_one_per_order_line"),
        ]

    def __str__(self):
        return f"{self.quantity} x {self.order_line_id}"


class Refund(BaseModel):
    """Money given back on a paid order: units of chosen lines and optionally the shipping, or an amount
    refunded at the provider (its dashboard) that the shop learnt of from a webhook.

    Claimed first (``requested``: the lines' and the order's refunded counts move in the same
    transaction), then asked of the provider, then ``succeeded`` (units restocked if staff asked) or
    ``failed`` (the claim is given back). ``orders.services.refunds`` says how.
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
    payment = models.ForeignKey("Payment", on_delete=models.PROTECT, related_name="refunds")
    state = models.CharField(max_length=20, choices=State.choices, default=State.REQUESTED, db_index=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.STAFF)
    amount = models.DecimalField(max_digits=12, decimal_places=2)  # lines and shipping, as paid
    shipping = models.DecimalField(max_digits=12, decimal_places=2, default=0)  # the shipping part of it
    restock = models.BooleanField(default=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # When its email went to the buyer (claimed before sending: ``orders.services.emails``).
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


class RefundLine(BaseModel):
    refund = models.ForeignKey(Refund, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="refund_lines")
    quantity = models.PositiveIntegerField()
    amount = models.DecimalField(max_digits=12, decimal_places=2)  # those units' share of what the line paid
    # Of them, those put back on hand when the refund succeeds: a return's units, or those of a refund
    # with ``restock`` that were never shipped (``LineUnits.cancels``); a unit at the customer never is.
    quantity_restocked = models.PositiveIntegerField(default=0)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0) & Q(amount__gte=0), name="refund_line_positive"),
            models.CheckConstraint(
                condition=Q(quantity_restocked__lte=F("quantity")), name="refund_line_restocked_within_quantity"
            ),
            models.UniqueConstraint(fields=["refund", "order_line"], name="refund_line_one_per_order_line"),
        ]

    def __str__(self):
        return f"{self.quantity} x {self.order_line_id}"


class ReturnRequest(BaseModel):
    """A buyer's request to send back units of a shipped order; staff accept it (the units are refunded and
    restocked) or refuse it (``orders.services.returns``). Each step is emailed to the buyer."""

    class State(models.TextChoices):
        REQUESTED = "requested", "Requested"
        ACCEPTED = "accepted", "Accepted: refunded"
        REFUSED = "refused", "Refused"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="returns")
    state = models.CharField(max_length=20, choices=State.choices, default=State.REQUESTED, db_index=True)
    reason = models.TextField(max_length=1000, blank=True)  # the buyer's words
    answer = models.TextField(max_length=1000, blank=True)  # staff's words, when they decide
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refund = models.OneToOneField(
        "Refund", null=True, blank=True, on_delete=models.PROTECT, related_name="return_request"
    )
    # The last state the buyer was emailed about (claimed before sending: ``orders.services.emails``).
    emailed_state = models.CharField(max_length=20, blank=True, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(state="accepted") | Q(refund__isnull=False), name="return_accepted_has_refund"
            ),
        ]

    def __str__(self):
        return f"Return #{self.pk} for order {self.order} ({self.state})"


class ReturnLine(BaseModel):
    return_request = models.ForeignKey(ReturnRequest, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="return_lines")
    quantity = models.PositiveIntegerField()

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="return_line_quantity_positive"),
            models.UniqueConstraint(fields=["return_request", "order_line"], name="return_line_one_per_order_line"),
        ]

    def __str__(self):
        return f"{self.quantity} x {self.order_line_id}"


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


class OrderEmail(BaseModel):
    """An email sent to an order's buyer; each kind at most once per order (``orders.services.emails``)."""

    class Kind(models.TextChoices):
        PLACED = "placed", "Order placed"
        PAID = "paid", "Receipt"
        PAYMENT_FAILED = "payment_failed", "Payment failed"
        EXPIRED = "expired", "Reservation expired"
        LATE_PAYMENT_REFUNDED = "late_payment_refunded", "Late payment refunded"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="emails")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    recipient = models.EmailField(blank=True)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["order", "kind"], name="order_email_once_per_kind")]

    def __str__(self):
        return f"{self.kind} {self.order_id}"
