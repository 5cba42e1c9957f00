from decimal import Decimal

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from treebeard.mp_tree import MP_Node

from core.errors import InvalidInput
from core.models import BaseModel, TimestampedModel

SKU_MAX_LENGTH = 64

sku_validator = RegexValidator(
    regex=r"^[A-Z0-9][A-Z0-9._-]{0,63}$",
    message="SKU: 1-64 characters, uppercase letters, digits, '.', '_' or '-', starting with a letter or digit.",
    code="invalid_sku",
)


def sku_normalise(value, *, field: str = "sku") -> str:
    """A SKU as the catalog stores it: without the spaces around it, in upper case.

    The one place a SKU from outside (a form, a URL, an order line, a command) is normalised. Anything
    that cannot be one (not a string, blank, too long) is ``InvalidInput`` on ``field``.
    """
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > SKU_MAX_LENGTH:
        raise InvalidInput(fields={field: "Must be a SKU string."})
    return value.strip().upper()


class Category(MP_Node, TimestampedModel):
    """A node of the catalog's category tree (materialised path: a category page reads its ancestors for the
    breadcrumbs and its descendants' products with one indexed prefix match each)."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)

    node_order_by = ["name"]

    class Meta:
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name


class Product(BaseModel):
    """What a customer browses: a name, a description, a category and images, sold as one or more
    ``ProductVariant``s. Nothing here is stock: a product is never locked, reserved or ordered itself."""

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    category = models.ForeignKey(
        Category,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="products",
        help_text="Its main category.",
    )

    class Meta(BaseModel.Meta):
        ordering = ["name", "id"]

    def __str__(self):
        return self.name


class Option(TimestampedModel):
    """Something variants of a product differ in, such as size or colour."""

    name = models.CharField(max_length=50, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class OptionValue(TimestampedModel):
    """One value of an option (size 42, colour black); ``position`` orders the picker's buttons."""

    option = models.ForeignKey(Option, on_delete=models.PROTECT, related_name="values")
    value = models.CharField(max_length=50)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["option__name", "position", "value"]
        constraints = [models.UniqueConstraint(fields=["option", "value"], name="option_value_unique")]

    def __str__(self):
        return f"{self.option.name} {self.value}"


class ProductVariant(BaseModel):
    """The unit of stock: one SKU of a product, in one combination of option values.

    Stock, locks, reservations, order lines and the stock ledger are all keyed by the variant (its SKU).
    A product sold in one form has one variant.
    """

    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="variants")
    option_values = models.ManyToManyField(OptionValue, blank=True, related_name="variants")
    # Unique across deleted rows too, so a restored variant never collides with a newer one.
    sku = models.CharField(max_length=SKU_MAX_LENGTH, unique=True, validators=[sku_validator])
    # What the cart and the order line call it: the product's name with the variant's option values.
    name = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal("0"))])
    is_active = models.BooleanField(default=True)
    # The most units one customer may hold across their unpaid and paid orders; empty: no limit.
    max_per_customer = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    # Orders are refused before this time, on the database's clock; empty: on sale now.
    sale_starts_at = models.DateTimeField(null=True, blank=True)
    # A reduced price in force from sale_price_from (empty: now) until sale_price_until (empty: until it is
    # removed), on the database's clock: an order is charged the price in force when its batch placed it.
    sale_price = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal("0"))]
    )
    sale_price_from = models.DateTimeField(null=True, blank=True)
    sale_price_until = models.DateTimeField(null=True, blank=True)
    # Goods sent by post; a ticket or a gift card is not, and an order of such goods asks for no address.
    requires_shipping = models.BooleanField(default=True)
    weight_grams = models.PositiveIntegerField(null=True, blank=True, help_text="For shipping methods' weight limits.")
    tax_class = models.ForeignKey(
        "tax.TaxClass",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty: the country's default rate.",
    )

    class Meta(BaseModel.Meta):
        ordering = ["sku"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price__gte=0), name="product_price_non_negative"),
            models.CheckConstraint(
                condition=models.Q(max_per_customer__isnull=True) | models.Q(max_per_customer__gte=1),
                name="product_max_per_customer_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(sale_price__isnull=True) | models.Q(sale_price__gte=0),
                name="product_sale_price_non_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(sale_price__isnull=False)
                | models.Q(sale_price_from__isnull=True, sale_price_until__isnull=True),
                name="product_sale_window_needs_a_price",
                violation_error_message="Give the sale price the start and end are for.",
            ),
            models.CheckConstraint(
                condition=models.Q(sale_price_from__isnull=True)
                | models.Q(sale_price_until__isnull=True)
                | models.Q(sale_price_until__gt=models.F("sale_price_from")),
                name="product_sale_window_ends_after_it_starts",
                violation_error_message="The sale price must end after it starts.",
            ),
        ]

    def __str__(self):
        return f"{self.sku} {self.name}"


def image_upload_to(image, filename: str) -> str:
    return f"products/{image.product_id}/{filename}"


class ProductImage(BaseModel):
    """A picture of a product; tied to a variant, it is the one shown when that variant is picked (the
    black one shows black). ``thumbnail`` is made once, when the image is added."""

    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="images")
    variant = models.ForeignKey(ProductVariant, null=True, blank=True, on_delete=models.PROTECT, related_name="images")
    image = models.ImageField(upload_to=image_upload_to, width_field="width", height_field="height")
    width = models.PositiveIntegerField(editable=False, default=0)
    height = models.PositiveIntegerField(editable=False, default=0)
    thumbnail = models.ImageField(upload_to="products/thumbnails/", editable=False, blank=True)
    alt = models.CharField(max_length=200, help_text="What the picture shows, for those who cannot see it.")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta(BaseModel.Meta):
        ordering = ["position", "id"]

    def __str__(self):
        return self.alt
