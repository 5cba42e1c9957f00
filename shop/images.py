"""Product images: what an upload must be, and its thumbnail, made once when the image is added."""

from io import BytesIO

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from PIL import Image, ImageOps, UnidentifiedImageError

ACCEPTED_FORMATS = {"JPEG": "JPEG", "PNG": "PNG", "WEBP": "WebP", "GIF": "GIF"}
THUMBNAIL_SIZE = (480, 480)


def product_image_check(file) -> None:
    """Refuse what is not a JPEG, PNG, WebP or GIF image, a file over ``PRODUCT_IMAGE_MAX_BYTES``, or an
    image of more than ``PRODUCT_IMAGE_MAX_PIXELS`` (read from its header, before any pixel is decoded)."""
    most_bytes = settings.PRODUCT_IMAGE_MAX_BYTES
    if file.size > most_bytes:
        raise ValidationError(
            f"The file is {file.size / 1e6:.1f} MB; an image may be at most {most_bytes / 1e6:.0f} MB.",
            code="image_too_large",
        )
    file.seek(0)
    try:
        with Image.open(file) as image:
            kind, (width, height) = image.format, image.size
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError):
        raise ValidationError("This file is not an image we can read.", code="not_an_image") from None
    finally:
        file.seek(0)
    if kind not in ACCEPTED_FORMATS:
        raise ValidationError(
            f"{kind} images are not accepted; upload a {', '.join(ACCEPTED_FORMATS.values())} image.",
            code="image_type",
        )
    if width * height > settings.PRODUCT_IMAGE_MAX_PIXELS:
        raise ValidationError(
            f"The image is {width} x {height} pixels; at most {settings.PRODUCT_IMAGE_MAX_PIXELS / 1e6:.0f} "
            "million pixels are accepted.",
            code="image_dimensions",
        )


def product_image_thumbnail_make(image) -> None:
    """Write ``image``'s thumbnail (a JPEG within ``THUMBNAIL_SIZE``, turned upright) through the storage API,
    unless it has one. Pages then serve the small file, never the upload."""
    if image.thumbnail:
        return
    with image.image.open("rb") as stored, Image.open(stored) as picture:
        thumbnail = ImageOps.exif_transpose(picture).convert("RGB")
        thumbnail.thumbnail(THUMBNAIL_SIZE)
        out = BytesIO()
        thumbnail.save(out, "JPEG", quality=85, optimize=True)
    image.thumbnail.save(f"{image.product_id}-{image.pk}.jpg", ContentFile(out.getvalue()), save=False)
    type(image).all_objects.filter(pk=image.pk).update(thumbnail=image.thumbnail.name)
