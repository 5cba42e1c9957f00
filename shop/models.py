from decimal import Decimal

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from core.models import BaseModel

sku_validator = RegexValidator(
    regex=r"^[A-Z0-9][A-Z0-9._-]{0,63}$",
    message="SKU: 1-64 characters, uppercase letters, digits, '.', '_' or '-', starting with a letter or digit.",
    code="invalid_sku",
)


class Product(BaseModel):
    # Unique across deleted rows too, so a restored product never collides with a newer one.
    sku = models.CharField(max_length=64, unique=True, validators=[sku_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    price = models.DecimalField(max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal("0"))])
    is_active = models.BooleanField(default=True)

    class Meta(BaseModel.Meta):
        ordering = ["sku"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price__gte=0), name="product_price_non_negative"),
        ]

    def __str__(self):
        return f"{self.sku} {self.name}"
