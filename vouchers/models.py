from django.db import models
from django.db.models import F, Q

from core.models import BaseModel

# How long a code may be: the width of Voucher.code and Order.voucher_code, and what every form, API and
# service accepts (a longer one is no code).
VOUCHER_CODE_MAX_LENGTH = 40


class Voucher(BaseModel):
    """A discount code. Its limited uses are counted like a SKU's stock: ``uses_reserved`` by unpaid orders,
    ``uses_committed`` by paid ones, never more than ``usage_limit`` together (a CHECK constraint), and
    every use is a ``VoucherUse`` row, the ledger ``reconcile`` checks the counters against."""

    class Kind(models.TextChoices):
        PERCENTAGE = "percentage", "Percentage off the items"
        FIXED = "fixed", "Fixed amount off the items"
        FREE_SHIPPING = "free_shipping", "Free shipping"

    # Stored in capitals: buyers type codes in any case.
    code = models.CharField(max_length=VOUCHER_CODE_MAX_LENGTH, unique=True)
    description = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.PERCENTAGE)
    value = models.DecimalField(
        max_digits=12, decimal_places=2, default=0, help_text="Percent for a percentage, an amount for a fixed amount."
    )
    minimum_subtotal = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    # The window, on the database's clock: in force from ``starts_at`` and before ``ends_at``.
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    usage_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Uses in all; empty: no limit.")
    limit_per_customer = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no limit.")
    # Empty both: every product. Otherwise the products named and those in the categories (and below).
    products = models.ManyToManyField("shop.Product", blank=True, related_name="+")
    categories = models.ManyToManyField("shop.Category", blank=True, related_name="+")
    uses_reserved = models.PositiveIntegerField(default=0, editable=False)
    uses_committed = models.PositiveIntegerField(default=0, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["code"]
        # ``reconcile`` checks the vouchers changed since its last clean run (``vouchers.selectors.voucher_books``).
        indexes = [models.Index(fields=["updated_at"], name="voucher_updated")]
        constraints = [
            models.CheckConstraint(
                condition=Q(usage_limit__isnull=True) | Q(usage_limit__gte=F("uses_reserved") + F("uses_committed")),
                name="voucher_uses_within_limit",
            ),
            models.CheckConstraint(
                condition=Q(uses_reserved__gte=0) & Q(uses_committed__gte=0), name="voucher_uses_not_negative"
            ),
            models.CheckConstraint(
                condition=~Q(kind="percentage") | (Q(value__gt=0) & Q(value__lte=100)),
                name="voucher_percentage_within_0_100",
            ),
            models.CheckConstraint(condition=Q(value__gte=0), name="voucher_value_not_negative"),
            models.CheckConstraint(condition=~Q(code=""), name="voucher_code_present"),
        ]

    def __str__(self):
        return self.code

    def save(self, *args, **kwargs):
        """Saving an existing voucher (an admin edit) never writes its use counters: orders move them
        meanwhile, and a copy read before would undo their moves."""
        self.code = voucher_code_normal(self.code)
        if self.pk is not None and not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                field.name
                for field in self._meta.concrete_fields
                if not field.primary_key and field.name not in ("uses_reserved", "uses_committed")
            ]
        super().save(*args, **kwargs)


def voucher_code_normal(code: str) -> str:
    """A code as stored and compared: trimmed, in capitals."""
    return code.strip().upper()


class VoucherUse(BaseModel):
    """One order's use of a voucher: reserved when placed, committed when paid, released when the order
    expires, fails, is cancelled (or refunded, if ``VOUCHER_RELEASE_ON_REFUND``)."""

    class State(models.TextChoices):
        RESERVED = "reserved", "Reserved"
        COMMITTED = "committed", "Committed"
        RELEASED = "released", "Released"

    voucher = models.ForeignKey(Voucher, on_delete=models.PROTECT, related_name="uses")
    order = models.OneToOneField("orders.Order", on_delete=models.PROTECT, related_name="voucher_use")
    # Who used it, as the limits per customer count buyers ("user:<id>" or "email:<canonical address>").
    buyer = models.CharField(max_length=300)
    state = models.CharField(max_length=20, choices=State.choices, default=State.RESERVED)
    discount = models.DecimalField(max_digits=12, decimal_places=2, default=0)

    class Meta(BaseModel.Meta):
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["voucher", "buyer", "state"], name="voucher_use_by_buyer"),
            # The reserved uses (few: the unpaid orders') and their orders, for the holding-stock checks;
            # the uses changed since reconcile's last clean run.
            models.Index(fields=["state", "order"], name="voucher_use_state_order"),
            models.Index(fields=["updated_at"], name="voucher_use_updated"),
        ]
        constraints = [models.CheckConstraint(condition=Q(discount__gte=0), name="voucher_use_discount_not_negative")]

    def __str__(self):
        return f"{self.voucher_id} by order {self.order_id} ({self.state})"
