from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django_countries.fields import CountryField

from core.models import BaseModel
from shipping.addresses import address_lines


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


class AddressBookEntry(BaseModel):
    """An address a customer keeps for checkout (``shipping.services``): one may be their default for
    shipping and one for billing. Orders keep their own copies, so editing an entry changes no order."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="address_book")
    address = models.JSONField()  # ``shipping.addresses.ADDRESS_FIELDS``, as ``address_clean`` returns them
    is_default_shipping = models.BooleanField(default=False)
    is_default_billing = models.BooleanField(default=False)

    class Meta(BaseModel.Meta):
        ordering = ["-is_default_shipping", "-is_default_billing", "id"]
        verbose_name_plural = "address book entries"

    def __str__(self):
        return ", ".join(address_lines(self.address))

    @property
    def lines(self) -> list[str]:
        return address_lines(self.address)
