"""Changing the catalog: a variant's terms of sale, a product's images, the order of an option's values."""

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.files import File
from django.db.models import Max
from django.utils import timezone

from core.errors import InvalidInput
from shop.images import product_image_check, product_image_thumbnail_make
from shop.models import Option, OptionValue, Product, ProductImage, ProductVariant

_UNSET = object()


def variant_sale_terms_set(
    *,
    variant: ProductVariant,
    max_per_customer=_UNSET,
    sale_starts_at=_UNSET,
    sale_price=_UNSET,
    sale_price_from=_UNSET,
    sale_price_until=_UNSET,
) -> ProductVariant:
    """Set a product's limit per customer, sale start and sale price with its window (None clears any);
    what is not given stays.

    Orders read them under the SKU's lock, so a change applies to every order decided after it. A sale
    window without a sale price, or one that ends before it starts, is ``InvalidInput``.
    """
    given = {
        "max_per_customer": max_per_customer,
        "sale_starts_at": sale_starts_at,
        "sale_price": sale_price,
        "sale_price_from": sale_price_from,
        "sale_price_until": sale_price_until,
    }
    changes: dict[str, int | Decimal | datetime | None] = {k: v for k, v in given.items() if v is not _UNSET}
    terms = {
        name: changes.get(name, getattr(variant, name))
        for name in ("sale_price", "sale_price_from", "sale_price_until")
    }
    if terms["sale_price"] is None and (terms["sale_price_from"] or terms["sale_price_until"]):
        raise InvalidInput(fields={"sale_price": "Give the sale price the start and end are for."})
    if terms["sale_price_from"] and terms["sale_price_until"] and terms["sale_price_until"] <= terms["sale_price_from"]:
        raise InvalidInput(fields={"sale_price_until": "The sale price must end after it starts."})
    if changes:
        ProductVariant.objects.filter(pk=variant.pk).update(**changes, updated_at=timezone.now())
    return ProductVariant.objects.get(pk=variant.pk)


def product_image_add(
    *, product: Product, file: File, alt: str, variant: ProductVariant | None = None, position: int = 0
) -> ProductImage:
    """Store an image of ``product`` (shown for ``variant`` only, if given) with its thumbnail, through the
    storage API. A file that is not an acceptable image is ``InvalidInput`` on ``image``."""
    try:
        product_image_check(file)
    except ValidationError as exc:
        raise InvalidInput(fields={"image": exc.messages[0]}) from None
    if variant is not None and variant.product_id != product.pk:
        raise InvalidInput(fields={"variant": "Not a variant of this product."})
    image = ProductImage(product=product, variant=variant, alt=alt, position=position)
    image.image.save(file.name.rsplit("/", 1)[-1], file, save=True)
    product_image_thumbnail_make(image)
    return image


def option_values_place(*, option: Option, values: list[OptionValue]) -> None:
    """Give each of ``option``'s ``values`` that has no position (a new one, say) the next one after its
    last value, in turn: sizes entered S, M, L are shown S, M, L, not sorted by name as equals at 0.
    Unsaved; the caller saves them."""
    last = OptionValue.objects.filter(option=option).aggregate(last=Max("position"))["last"] if option.pk else None
    following = 0 if last is None else last + 1
    for value in values:
        if value.position is None:
            value.position, following = following, following + 1
