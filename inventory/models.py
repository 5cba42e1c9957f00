from django.conf import settings
from django.db import models
from django.db.models import F, Q

from core.models import TimestampedModel, TimestampedQuerySet


class Stock(TimestampedModel):
    """Counters for one product. Changed only by ``inventory.services`` with guarded UPDATEs.

    Not soft-deletable: hiding a stock row would strand its reservations and unbalance the books.
    Retire a product by deactivating or deleting the product; its stock row stays.
    """

    variant = models.OneToOneField("shop.ProductVariant", on_delete=models.PROTECT, related_name="stock")
    on_hand = models.IntegerField(default=0)
    reserved = models.IntegerField(default=0)
    # Bumped by every change: lets editors compare-and-set instead of overwriting blindly.
    version = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["variant_id"]
        constraints = [
            models.CheckConstraint(condition=Q(on_hand__gte=0), name="stock_on_hand_non_negative"),
            models.CheckConstraint(condition=Q(reserved__gte=0), name="stock_reserved_non_negative"),
            models.CheckConstraint(condition=Q(reserved__lte=F("on_hand")), name="stock_reserved_within_on_hand"),
        ]

    def __str__(self):
        return f"{self.variant.sku}: {self.available} available ({self.on_hand} on hand, {self.reserved} reserved)"

    @property
    def available(self) -> int:
        return self.on_hand - self.reserved


class Reservation(TimestampedModel):
    """Units of one order line held for the customer until paid, released, or expired.

    Not soft-deletable: a hidden active reservation would hold its units forever. It ends by
    being committed or released, and the ledger keeps its history.
    """

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        COMMITTED = "committed", "Committed"
        RELEASED = "released", "Released"

    class ReleaseReason(models.TextChoices):
        EXPIRED = "expired", "Expired"
        PAYMENT_FAILED = "payment_failed", "Payment failed"
        CANCELLED = "cancelled", "Cancelled"

    order_line = models.ForeignKey("orders.OrderLine", on_delete=models.PROTECT, related_name="reservations")
    variant = models.ForeignKey("shop.ProductVariant", on_delete=models.PROTECT, related_name="reservations")
    quantity = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    release_reason = models.CharField(max_length=32, choices=ReleaseReason.choices, blank=True)

    class Meta:
        ordering = ["id"]
        # A sold-out mark lives no longer than the SKU's first active reservation (inventory.batching).
        indexes = [models.Index(fields=["variant", "state", "expires_at"], name="reservation_product_expiry")]
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="reservation_quantity_positive"),
            models.CheckConstraint(
                condition=Q(state="released", release_reason__gt="") | (~Q(state="released") & Q(release_reason="")),
                name="reservation_release_reason_iff_released",
            ),
        ]

    def __str__(self):
        return f"{self.quantity} × {self.variant.sku} ({self.get_state_display().lower()})"


class StockMovementQuerySet(TimestampedQuerySet):
    def update(self, **kwargs):
        raise TypeError("The stock ledger is append-only")

    def delete(self):
        raise TypeError("The stock ledger is append-only")


class StockMovement(TimestampedModel):
    """Append-only ledger: per stock, the deltas sum to the counters. Never soft-deleted, never edited."""

    class Kind(models.TextChoices):
        RESTOCK = "restock", "Restock"
        ADJUST = "adjust", "Adjust"
        RESERVE = "reserve", "Reserve"
        COMMIT = "commit", "Commit"
        RELEASE = "release", "Release"

    stock = models.ForeignKey(Stock, on_delete=models.PROTECT, related_name="movements")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    on_hand_delta = models.IntegerField(default=0)
    reserved_delta = models.IntegerField(default=0)
    order = models.ForeignKey("orders.Order", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # The order line a refund put back on hand (``refund_restock``).
    order_line = models.ForeignKey(
        "orders.OrderLine", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reservation = models.ForeignKey(
        Reservation, null=True, blank=True, on_delete=models.PROTECT, related_name="movements"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.CharField(max_length=255, blank=True)

    objects = StockMovementQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["stock", "id"])]

    def __str__(self):
        changes = [
            f"{delta:+d} {name}"
            for name, delta in [("on hand", self.on_hand_delta), ("reserved", self.reserved_delta)]
            if delta
        ]
        return f"{self.get_kind_display()}: {', '.join(changes) or 'no change'}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("The stock ledger is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("The stock ledger is append-only")


class LedgerCheckpoint(TimestampedModel):
    """A stock's ledger sums through one movement, so checking the books adds only the movements after it.

    One per stock, moved forward by the reconcile task (``inventory.services.ledger_checkpoint_list_take``)
    through movements older than a margin: what ``reconcile`` reads then follows recent activity, not
    history. ``reconcile --full`` sums the whole ledger and verifies the checkpoints against it.
    """

    stock = models.OneToOneField(Stock, on_delete=models.PROTECT, related_name="checkpoint")
    through_movement_id = models.BigIntegerField()  # the sums are of this stock's movements with id <= this
    on_hand = models.IntegerField()
    reserved = models.IntegerField()

    class Meta:
        ordering = ["stock_id"]

    def __str__(self):
        return f"stock {self.stock_id} through movement {self.through_movement_id}"
