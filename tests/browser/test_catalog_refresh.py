"""The catalog keeps availability current from the API, without a reload."""

from playwright.sync_api import expect

from inventory.services import stock_restock
from orders.services import order_place


def test_the_catalog_shows_stock_changes_without_a_reload(page, make_variant, customer):
    make_variant(sku="MUG", name="Logo mug", stock=5)
    make_variant(sku="CAP", name="Navy cap", stock=0)
    page.goto("/")
    mug, cap = page.locator('[data-available-for="MUG"]'), page.locator('[data-available-for="CAP"]')
    expect(mug).to_have_text("5 available")
    expect(cap).to_have_text("Sold out")
    page.evaluate("window.sameDocument = true")  # gone if the page were reloaded

    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 5}], idempotency_key="k1")
    stock_restock(sku="CAP", quantity=3)
    expect(mug).to_have_text("Sold out", timeout=15_000)  # the page polls every 5 s: three polls
    expect(cap).to_have_text("3 available")
    assert page.evaluate("window.sameDocument") is True
