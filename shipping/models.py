from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django_countries.fields import CountryField

from core.models import BaseModel


class ShippingZone(BaseModel):
    """Countries the shop ships to alike; its methods are offered for an address in any of them."""

    name = models.CharField(max_length=100)
    countries = CountryField(multiple=True, blank=False)

    class Meta(BaseModel.Meta):
        ordering = ["name"]

    def __str__(self):
        return self.name


class ShippingMethod(BaseModel):
    """A way to send an order to a zone, at a price; free from an order amount, limited by weight if set."""

    zone = models.ForeignKey(ShippingZone, on_delete=models.PROTECT, related_name="methods")
    name = models.CharField(max_length=100)
    price = models.DecimalField(max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal(0))])
    free_above = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Free for orders whose items come to at least this amount; empty: never free.",
    )
    min_weight_grams = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no lower limit.")
    max_weight_grams = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no upper limit.")
    is_active = models.BooleanField(default=True)

    class Meta(BaseModel.Meta):
        ordering = ["zone__name", "price", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(price__gte=0), name="shipping_method_price_non_negative"),
            models.CheckConstraint(
                condition=Q(free_above__isnull=True) | Q(free_above__gte=0),
                name="shipping_method_free_above_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(min_weight_grams__isnull=True)
                | Q(max_weight_grams__isnull=True)
                | Q(min_weight_grams__lte=F("max_weight_grams")),
                name="shipping_method_weight_range",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.zone})"
