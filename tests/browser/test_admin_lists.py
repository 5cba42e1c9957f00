"""The orders and payment events lists fit a 1280 px window: staff see every column without scrolling."""

import pytest

from demo.catalog import demo_catalog_seed
from orders.services import order_place
from tests.browser.conftest import screenshot
from tests.conftest import ADDRESS_DE, pay

WIDTH = 1280


@pytest.mark.parametrize("path", ["/admin/orders/order/", "/admin/payments/paymentevent/"])
def test_the_orders_and_payment_events_lists_fit_1280_px(page, shipping_rules, path):
    demo_catalog_seed(staff_password="staff-pass-123")
    for n in range(3):
        order = order_place(
            email=f"a-rather-long-address-of-buyer-{n}@subdomain.example.com",
            items=[{"sku": "MUG-LOGO", "quantity": 1}],
            idempotency_key=f"k{n}",
            shipping_address=ADDRESS_DE,
            shipping_method=shipping_rules["standard"].pk,
        )
        pay(order, decline=n == 2)
    page.set_viewport_size({"width": WIDTH, "height": 800})
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("staff")
    page.get_by_label("Password").fill("staff-pass-123")
    page.get_by_role("button", name="Log in").click()

    page.goto(path)

    assert page.locator("#result_list tbody tr").count() >= 3
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    last_column = page.locator("#result_list thead th").last.bounding_box()
    assert last_column["x"] + last_column["width"] <= WIDTH
    screenshot(page, "admin" + path.replace("/", "-").rstrip("-"))
