"""A flash sale in the browser: the countdown before it opens, add-to-cart once it does, sold out after."""

from datetime import timedelta

from playwright.sync_api import expect

from core.clock import db_now
from orders.services import order_place
from shop.models import ProductVariant
from tests.browser.conftest import screenshot


def test_the_variant_page_counts_down_opens_and_shows_sold_out(page, make_variant, customer):
    sneaker = make_variant(sku="SNEAKER", name="Limited sneaker", stock=2, price="149.00")
    ProductVariant.objects.filter(pk=sneaker.pk).update(
        sale_starts_at=db_now() + timedelta(seconds=4), max_per_customer=2
    )

    page.goto("/products/SNEAKER/")
    expect(page.get_by_text("The sale opens in")).to_be_visible()
    expect(page.get_by_text("At most 2 per customer.")).to_be_visible()
    expect(page.get_by_role("button", name="Add to cart")).to_have_count(0)
    screenshot(page, "flash-sale-before")

    expect(page.get_by_role("button", name="Add to cart")).to_be_enabled(timeout=15_000)  # reloaded at the start
    expect(page.locator('[data-available-for="SNEAKER"]')).to_have_text("2 available")
    screenshot(page, "flash-sale-open")
    page.evaluate("window.sameDocument = true")  # gone if the page were reloaded

    order_place(customer=customer, items=[{"sku": "SNEAKER", "quantity": 2}], idempotency_key="all-of-it")
    expect(page.locator('[data-available-for="SNEAKER"]')).to_have_text("Sold out", timeout=15_000)  # polled
    expect(page.get_by_role("button", name="Add to cart")).to_be_disabled()
    assert page.evaluate("window.sameDocument") is True
    screenshot(page, "flash-sale-sold-out")


def test_the_catalog_says_when_a_sale_opens(page, make_variant):
    sneaker = make_variant(sku="SNEAKER", name="Limited sneaker", stock=2)
    ProductVariant.objects.filter(pk=sneaker.pk).update(sale_starts_at=db_now() + timedelta(hours=2))

    page.goto("/")
    expect(page.locator('[data-available-for="SNEAKER"]')).to_contain_text("Opens at")
    expect(page.locator('[data-add-for="SNEAKER"]')).to_be_disabled()
