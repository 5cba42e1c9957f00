import secrets
from functools import cached_property

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.models import BaseModel
from orders.units import LineUnits
from shipping.addresses import address_lines
from vouchers.models import VOUCHER_CODE_MAX_LENGTH

# No 0/O/1/I: numbers get read out over the phone.
_NUMBER_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def new_order_number() -> str:
    # One read of the system's random source (secrets.choice makes one per character, and a lock
    # holder numbers every order of its batch); 256 is a multiple of the 32 letters, so none is favoured.
    return "".join(_NUMBER_ALPHABET[byte % len(_NUMBER_ALPHABET)] for byte in secrets.token_bytes(10))


class Order(BaseModel):
    class Status(models.TextChoices):
        AWAITING_PAYMENT = "awaiting_payment", "Awaiting payment"
        # Units held for a buyer a drop's line admitted (``orders.services.holding``), until they check out
        # (then awaiting payment) or the drop's checkout window lapses (then expired, like any unpaid order).
        HELD = "held", "Held for checkout"
        PAID = "paid", "Paid"
        PARTIALLY_SHIPPED = "partially_shipped", "Partially shipped"
        SHIPPED = "shipped", "Shipped"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"
        PAYMENT_FAILED = "payment_failed", "Payment failed"
        REFUNDED = "refunded", "Refunded"

    # The text a buyer gives with an order beyond its lines, addresses, method and voucher (which have
    # checks of their own): each names a CharField below with a ``max_length`` and ``blank=True``. The
    # checkout form, the API's input and output, ``order_place`` (checked, queued as ``PlaceRequest.given``,
    # written by ``order_row``, in the idempotency fingerprint) and the admin read their fields from here.
    BUYER_FIELDS: tuple[str, ...] = ()

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
    voucher_code = models.CharField(max_length=VOUCHER_CODE_MAX_LENGTH, blank=True)
    discount = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    # What refunds took back so far (``payments.services.refunds``), claimed before the provider is asked:
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
    def is_paid(self) -> bool:
        """Its payment was applied (``PAID_STATUSES``): staff may refund it."""
        return self.status in PAID_STATUSES

    @property
    def is_shippable(self) -> bool:
        """Staff may ship its units now (``SHIPPABLE_STATUSES``)."""
        return self.status in SHIPPABLE_STATUSES

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
    def refunds_shown(self) -> list:
        """The refunds (``payments.Refund``) made or under way (not those the provider refused), oldest first;
        prefetched ones (``refunds__lines__order_line__variant``) cost no query."""
        failed = self.refunds.model.State.FAILED
        return [refund for refund in self.refunds.all() if refund.state != failed]

    def lines_with_variants(self) -> list["OrderLine"]:
        """The lines with their products, by product id; prefetched ones (``lines__variant``) cost no query."""
        prefetched = getattr(self, "_prefetched_objects_cache", {}).get("lines")
        if prefetched is not None:  # read directly: a related manager per call costs a hot SKU's buyers
            return sorted(prefetched, key=lambda line: line.variant_id)
        return list(self.lines.select_related("variant").order_by("variant_id"))


# An order that holds its units reserved and is not paid: the sweep expires it when it is due, and its units
# count toward its buyer's limits.
OPEN_STATUSES = (Order.Status.AWAITING_PAYMENT, Order.Status.HELD)
# An order whose payment was applied: paid, and then shipped in part or in full (``fulfilment.services.shipments``);
# only these are refunded. Of them, those with units left that staff may ship now.
PAID_STATUSES = (Order.Status.PAID, Order.Status.PARTIALLY_SHIPPED, Order.Status.SHIPPED)
SHIPPABLE_STATUSES = (Order.Status.PAID, Order.Status.PARTIALLY_SHIPPED)


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


class OrderEmail(BaseModel):
    """An email sent to an order's buyer; each kind at most once per order (``fulfilment.emails``)."""

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


class OrderLineUnits(BaseModel):
    """Units of one order line that a shipment, a refund or a return takes: at least one, and one row per
    order line in each. A subclass adds its parent and its ``order_line`` (each with its own related
    name), and takes its constraints from ``order_line_units_constraints``."""

    quantity = models.PositiveIntegerField()

    class Meta(BaseModel.Meta):
        abstract = True
        ordering = ["id"]

    def __str__(self):
        return f"{self.quantity} x {self.order_line_id}"


def order_line_units_constraints(*, parent: str, name: str, positive: Q | None = None) -> list:
    """The constraints of an ``OrderLineUnits`` table: ``quantity`` above zero (with ``positive``, if given,
    as one CHECK) and one row per ``parent`` and order line; named ``<name>_...`` as their tables had them."""
    quantity = Q(quantity__gt=0)
    return [
        models.CheckConstraint(
            condition=quantity if positive is None else quantity & positive,
            name=f"{name}_quantity_positive" if positive is None else f"{name}_positive",
        ),
        models.UniqueConstraint(fields=[parent, "order_line"], name=f"{name}_one_per_order_line"),
    ]
