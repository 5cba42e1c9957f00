"""Product images: uploaded in the admin, refused with a clear message when they are not what a shop can
show, stored through the storage API with a thumbnail made once, and served with the pages."""

from io import BytesIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from shop.models import Product, ProductImage

pytestmark = pytest.mark.django_db


def picture(kind="PNG", size=(1200, 800), colour=(20, 20, 20), mode="RGB") -> bytes:
    out = BytesIO()
    Image.new(mode, size, colour if mode == "RGB" else 0).save(out, kind)
    return out.getvalue()


def upload(staff_admin, product, content: bytes, name: str, *, alt="Black sneaker, side view", variant=""):
    form = {
        "name": product.name,
        "description": "",
        "images-TOTAL_FORMS": "1",
        "images-INITIAL_FORMS": "0",
        "images-MIN_NUM_FORMS": "0",
        "images-MAX_NUM_FORMS": "1000",
        "images-0-image": SimpleUploadedFile(name, content),
        "images-0-alt": alt,
        "images-0-variant": variant,
        "images-0-position": "0",
        "_save": "Save",
    }
    return staff_admin.post(reverse("admin:shop_product_change", args=[product.pk]), form)


def image_errors(response) -> list[str]:
    return [
        str(error)
        for form in response.context["inline_admin_formsets"][0].formset.forms
        for error in form.errors.get("image", [])
    ]


def test_staff_upload_an_image_tied_to_a_variant_and_its_thumbnail_is_made_once_and_served(
    staff_admin, make_variant, client, media_root
):
    black = make_variant(sku="SNEAKER-BLACK-42", name="Sneaker, Black / 42", stock=3)
    white = make_variant(sku="SNEAKER-WHITE-42", name="Sneaker, White / 42", stock=3, product=black.product)

    response = upload(staff_admin, black.product, picture(), "black.png", variant=black.pk)

    assert response.status_code == 302, image_errors(response)
    image = ProductImage.objects.get()
    assert (image.variant, image.width, image.height, image.alt) == (black, 1200, 800, "Black sneaker, side view")
    assert image.thumbnail.name.endswith(".jpg") and (media_root / image.thumbnail.name).exists()
    with Image.open(media_root / image.thumbnail.name) as thumbnail:
        assert max(thumbnail.size) == 480
    made = (media_root / image.thumbnail.name).stat().st_mtime_ns
    staff_admin.get(reverse("admin:shop_product_change", args=[black.product.pk]))
    client.get(reverse("product", args=[black.sku]))
    assert (media_root / image.thumbnail.name).stat().st_mtime_ns == made  # never made again

    page = client.get(reverse("product", args=[black.sku])).content.decode()
    assert f'src="/media/{image.thumbnail.name}" alt="Black sneaker, side view"' in page
    assert image.thumbnail.name not in client.get(reverse("product", args=[white.sku])).content.decode()
    served = client.get(f"/media/{image.thumbnail.name}")
    assert served.status_code == 200 and b"".join(served.streaming_content)[:2] == b"\xff\xd8"  # a JPEG


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"GIF89a but not really an image", "fake.gif", "Upload a valid image"),
        (b"#!/bin/sh\necho hi\n", "script.png", "Upload a valid image"),
        (picture("TIFF", size=(20, 20)), "scan.tiff", "TIFF images are not accepted"),
        (picture("PNG", size=(9000, 5000), mode="L"), "huge.png", "The image is 9000 x 5000 pixels"),
    ],
    ids=["not-an-image", "script-named-png", "wrong-type", "huge-dimensions"],
)
def test_a_bad_upload_is_refused_with_a_clear_message_and_nothing_is_stored(
    staff_admin, make_variant, media_root, content, name, message
):
    variant = make_variant(sku="CAP")

    response = upload(staff_admin, variant.product, content, name)

    assert response.status_code == 200
    assert any(message in error for error in image_errors(response)), image_errors(response)
    assert not ProductImage.objects.exists()
    assert not (media_root / "products").exists()


def test_a_file_over_the_size_limit_is_refused_before_it_is_opened(staff_admin, make_variant, settings, media_root):
    settings.PRODUCT_IMAGE_MAX_BYTES = 1000
    variant = make_variant(sku="CAP")

    response = upload(
        staff_admin, variant.product, picture(size=(400, 400), colour=(1, 2, 3)) + b"\0" * 2000, "big.png"
    )

    assert any("an image may be at most" in error for error in image_errors(response)), image_errors(response)
    assert not ProductImage.objects.exists()


def test_a_product_without_images_shows_no_gallery(client, make_variant):
    variant = make_variant(sku="MUG", stock=1)
    assert 'class="gallery"' not in client.get(reverse("product", args=[variant.sku])).content.decode()
    assert Product.objects.count() == 1
