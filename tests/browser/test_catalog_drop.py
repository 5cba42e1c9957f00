"""A drop in a real browser: the catalog and a category with pictures, the product page's size picker with the
sold-out size disabled (and a size selling out while the page is open disabled live), then cart and
checkout; screenshots of the catalog, a category and a product page."""

from decimal import Decimal

import pytest
from django.core.files import File
from playwright.sync_api import expect

from demo.catalog import DEMO_IMAGES
from inventory.services import stock_adjust
from inventory.variants import product_variants_generate
from orders.models import Order
from shop.models import Category, Option, OptionValue, Product, ProductVariant
from shop.services import product_image_add
from tests.browser.conftest import screenshot
from tests.browser.test_checkout_shipping import fill_address, method, posting_checkout
from tests.conftest import ADDRESS_DE, assert_books_balance, stock_of


def picture(product, name: str, alt: str, variant=None):
    with (DEMO_IMAGES / f"{name}.jpg").open("rb") as stored:
        product_image_add(product=product, file=File(stored, name=f"{name}.jpg"), alt=alt, variant=variant)


@pytest.fixture
def drop(transactional_db, shipping_rules, make_variant):
    shoes = Category.objects.add_root({"name": "Shoes", "slug": "shoes"})
    sneakers = Category.objects.add_child(shoes, {"name": "Sneakers", "slug": "sneakers"})
    accessories = Category.objects.add_root({"name": "Accessories", "slug": "accessories"})
    size = Option.objects.create(name="Size")
    sizes = [OptionValue.objects.create(option=size, value=v, position=i) for i, v in enumerate(["41", "42", "43"])]
    sneaker = Product.objects.create(name="Drop sneaker", description="This season's drop.", category=sneakers)
    product_variants_generate(product=sneaker, values=sizes, price=Decimal("129.00"), initial_stock=3)
    ProductVariant.objects.filter(product=sneaker).update(weight_grams=900)
    sold_out = ProductVariant.objects.get(sku="DROP-SNEAKER-42")
    stock_adjust(sku=sold_out.sku, set_to=0, expected_version=stock_of(sold_out).version, reason="sold out")
    picture(sneaker, "drop-sneaker-side", "Blue drop sneaker, side view")
    mug = make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50", requires_shipping=True, weight_grams=400)
    Product.objects.filter(pk=mug.product_id).update(category=accessories)
    picture(mug.product, "mug", "White mug with a blue dot")
    return sneaker


def test_category_then_a_size_with_the_sold_out_one_disabled_then_cart_and_checkout(page, drop):
    page.goto("/")
    expect(page.get_by_role("heading", name="Catalog")).to_be_visible()
    expect(page.get_by_role("img", name="Blue drop sneaker, side view")).to_be_visible()
    expect(page.get_by_role("img", name="White mug with a blue dot")).to_be_visible()
    screenshot(page, "catalog-with-images")

    page.get_by_role("link", name="Shoes").click()
    expect(page.get_by_role("heading", name="Shoes")).to_be_visible()
    expect(page.get_by_role("link", name="Drop sneaker", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Logo mug", exact=True)).to_have_count(0)
    screenshot(page, "category-shoes")

    page.get_by_role("link", name="Drop sneaker", exact=True).click()
    breadcrumb = page.get_by_role("navigation", name="Breadcrumb")
    expect(breadcrumb.get_by_role("link")).to_have_text(["Catalog", "Shoes", "Sneakers"])
    picker = page.get_by_role("group", name="Size")
    expect(picker.get_by_role("button", name="42 sold out")).to_be_disabled()
    picker.get_by_role("link", name="43").click()
    expect(page).to_have_url(f"{page.url.rsplit('/products/', 1)[0]}/products/DROP-SNEAKER-43/")
    expect(picker.locator("[aria-current]")).to_have_text("43")
    expect(picker.get_by_role("button", name="42 sold out")).to_be_disabled()
    expect(page.get_by_text("3 available")).to_be_visible()
    expect(page.get_by_role("img", name="Blue drop sneaker, side view")).to_be_visible()
    screenshot(page, "product-drop-sneaker")
    size_41 = ProductVariant.objects.get(sku="DROP-SNEAKER-41")  # sold out in the shop next door
    stock_adjust(sku=size_41.sku, set_to=0, expected_version=stock_of(size_41).version, reason="sold in store")
    expect(picker.get_by_role("link", name="41")).to_have_attribute("aria-disabled", "true", timeout=12_000)

    page.get_by_role("button", name="Add to cart").click()
    expect(page.get_by_role("heading", name="Your cart")).to_be_visible()
    expect(page.get_by_role("link", name="Drop sneaker, 43")).to_be_visible()
    page.get_by_role("link", name="Check out").click()
    expect(page.get_by_role("heading", name="Checkout")).to_be_visible()
    with posting_checkout(page):
        fill_address(page, ADDRESS_DE, country="Germany")
    expect(method(page, "Standard: €0.00")).to_be_checked()  # free from 50.00
    page.get_by_role("button", name="Place order").click()
    expect(page.get_by_role("heading", name="Order")).to_be_visible()

    order = Order.objects.get()
    [line] = order.lines.all()
    assert (line.variant.sku, line.quantity, line.unit_price) == ("DROP-SNEAKER-43", 1, Decimal("129.00"))
    sizes = {v.sku: (stock_of(v).on_hand, stock_of(v).reserved) for v in ProductVariant.objects.filter(product=drop)}
    assert sizes == {"DROP-SNEAKER-41": (0, 0), "DROP-SNEAKER-42": (0, 0), "DROP-SNEAKER-43": (3, 1)}
    assert_books_balance(*ProductVariant.objects.all())
