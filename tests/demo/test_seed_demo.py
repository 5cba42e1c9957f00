from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from orders.services import order_quote
from shipping.models import ShippingZone
from shop.models import Category, Product, ProductImage, ProductVariant
from tax.models import TaxRate
from tests.conftest import assert_books_balance
from vouchers.models import Voucher

pytestmark = pytest.mark.django_db


def run(*args, **env):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_seed_demo_is_idempotent_and_prints_a_generated_password(monkeypatch):
    monkeypatch.delenv("DEMO_STAFF_PASSWORD", raising=False)
    first = run("seed_demo")
    variants = {p.sku: p.stock.on_hand for p in ProductVariant.objects.select_related("stock")}

    second = run("seed_demo")

    # 11 products, the sneaker in four sizes and the hoodie in two colours: 15 variants.
    assert Product.objects.count() == 11 and ProductVariant.objects.count() == 15
    assert "Products: 11 created, 0 already there; variants: 15 created, 0 already there." in first
    assert "Products: 0 created, 11 already there; variants: 0 created, 15 already there." in second
    assert "Staff user: staff / password: " in first and "password unchanged" in second
    assert "Vouchers: 2 created" in first and "Vouchers: 0 created" in second
    assert set(Voucher.objects.values_list("code", flat=True)) == {"DROP10", "SHIPFREE"}
    assert ShippingZone.objects.count() == 3 and TaxRate.objects.count() == 10  # not made twice
    assert {p.sku: p.stock.on_hand for p in ProductVariant.objects.select_related("stock")} == variants
    staff = get_user_model().objects.get(username="staff")
    password = first.split("password: ")[1].split()[0]
    assert staff.is_staff and staff.check_password(password)
    assert staff.has_perm("inventory.change_stock") and staff.has_perm("vouchers.change_voucher")
    assert_books_balance(*ProductVariant.objects.all())


def test_the_demo_ships_and_taxes_so_a_newcomer_can_check_out_at_once():
    run("seed_demo")

    to_germany = order_quote(items=[{"sku": "MUG-LOGO", "quantity": 1}, {"sku": "BOOK-SNEAKERS", "quantity": 1}],
                             shipping_country="DE")  # fmt: skip
    ticket = order_quote(items=[{"sku": "TICKET-LAUNCH", "quantity": 1}])

    assert [offer.name for offer in to_germany.shipping_offers] == ["Standard", "Express"]
    assert [line.tax_rate for line in to_germany.price.lines] == [19, 7]  # the book at the reduced rate
    assert to_germany.price.total == Decimal("41.40")  # 12.50 + 24.00 + 4.90, tax included
    assert not ticket.ships and ticket.price.shipping_method is None


def test_seed_demo_takes_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("DEMO_STAFF_PASSWORD", "correct-horse-battery")
    output = run("seed_demo")
    assert "correct-horse-battery" not in output
    assert get_user_model().objects.get(username="staff").check_password("correct-horse-battery")


def test_the_demo_catalog_has_categories_variants_and_images_with_thumbnails(media_root):
    run("seed_demo")

    hoodie = Product.objects.get(name="Logo hoodie")
    assert hoodie.category.slug == "clothing"
    assert sorted(hoodie.variants.values_list("sku", flat=True)) == ["LOGO-HOODIE-BLACK", "LOGO-HOODIE-WHITE"]
    black = hoodie.images.get(alt__startswith="Black")
    assert black.variant.sku == "LOGO-HOODIE-BLACK" and (media_root / black.thumbnail.name).exists()
    sneaker = Product.objects.get(name="Drop sneaker")
    assert Category.objects.get_parent(sneaker.category).slug == "shoes"
    stock = {v.sku: v.stock.on_hand for v in sneaker.variants.select_related("stock")}
    assert stock == {"DROP-SNEAKER-41": 4, "DROP-SNEAKER-42": 0, "DROP-SNEAKER-43": 6, "DROP-SNEAKER-44": 2}
    assert ProductImage.objects.count() == 13 and all(image.thumbnail for image in ProductImage.objects.all())
    assert not Product.objects.filter(category__isnull=True).exists()
    assert_books_balance(*ProductVariant.objects.all())
