from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django_countries.fields import CountryField

from core.models import BaseModel


class TaxClass(BaseModel):
    """A kind of goods taxed at its own rate in some countries (reduced VAT for books, say).

    A product without a class is taxed at its country's default rate."""

    name = models.CharField(max_length=100, unique=True)

    class Meta(BaseModel.Meta):
        ordering = ["name"]
        verbose_name_plural = "tax classes"

    def __str__(self):
        return self.name


class TaxRate(BaseModel):
    """The rate of tax in a country, in percent: the country's default (no class), or a class's there.

    A country without a rate is not taxed (an export, say)."""

    country = CountryField()
    tax_class = models.ForeignKey(
        TaxClass, null=True, blank=True, on_delete=models.PROTECT, related_name="rates", help_text="Empty: the default."
    )
    rate = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(100))],
        help_text="Percent, e.g. 19 or 7.5.",
    )

    class Meta(BaseModel.Meta):
        ordering = ["country", "tax_class__name"]
        constraints = [
            models.CheckConstraint(condition=Q(rate__gte=0) & Q(rate__lte=100), name="tax_rate_percent"),
            # A class has one rate per country; the default's uniqueness (NULL class) is checked in clean().
            models.UniqueConstraint(fields=["country", "tax_class"], name="tax_rate_one_per_country_and_class"),
        ]

    def __str__(self):
        return f"{self.country.name}: {self.rate}% ({self.tax_class or 'default'})"

    def clean(self):
        """One default rate per country: MariaDB's unique index lets NULL classes repeat."""
        if self.tax_class_id is None and (
            TaxRate.objects.filter(country=self.country, tax_class=None).exclude(pk=self.pk).exists()
        ):
            raise ValidationError({"country": "This country has a default rate already."})
