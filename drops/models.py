"""A drop: variants that sell, while its line is on, only to the buyers its line admits (``drops.line``)."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from core.models import BaseModel

# A checkout window shorter than this leaves no time to type an address; longer than a day is no drop.
CHECKOUT_WINDOW_MIN_SECONDS, CHECKOUT_WINDOW_MAX_SECONDS = 10, 86_400
UNITS_PER_BUYER_MAX = 10


class Drop(BaseModel):
    """When the line opens, how long an admitted buyer holds their units, and how many each buyer gets.

    The sale itself opens at the variants' ``sale_starts_at``; the line may open before it, so the crowd
    lines up and the first are admitted the moment the sale starts. With ``line_on`` off the variants
    sell as any other, first come first served.
    """

    name = models.CharField(max_length=100)
    line_opens_at = models.DateTimeField(help_text="When buyers can join the line.")
    checkout_window_seconds = models.PositiveIntegerField(
        default=600,
        validators=[MinValueValidator(CHECKOUT_WINDOW_MIN_SECONDS), MaxValueValidator(CHECKOUT_WINDOW_MAX_SECONDS)],
        help_text="How long an admitted buyer holds their units to check out and pay.",
    )
    units_per_buyer = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(UNITS_PER_BUYER_MAX)]
    )
    line_on = models.BooleanField(
        default=True, help_text="Sell only to buyers the line admits. Off: first come, first served."
    )
    variants = models.ManyToManyField("shop.ProductVariant", through="DropVariant", related_name="+")

    class Meta(BaseModel.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(checkout_window_seconds__gte=CHECKOUT_WINDOW_MIN_SECONDS)
                & Q(checkout_window_seconds__lte=CHECKOUT_WINDOW_MAX_SECONDS),
                name="drop_checkout_window_in_range",
            ),
            models.CheckConstraint(
                condition=Q(units_per_buyer__gte=1) & Q(units_per_buyer__lte=UNITS_PER_BUYER_MAX),
                name="drop_units_per_buyer_in_range",
            ),
        ]

    def __str__(self):
        return self.name


class DropVariant(models.Model):
    """A variant in a drop; a variant is in one drop at most, so its line is never in doubt."""

    drop = models.ForeignKey(Drop, on_delete=models.CASCADE, related_name="entries")
    variant = models.OneToOneField("shop.ProductVariant", on_delete=models.PROTECT, related_name="drop_entry")

    def __str__(self):
        return f"{self.drop} · {self.variant}"
