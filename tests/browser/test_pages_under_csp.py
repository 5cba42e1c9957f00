"""Pages the other browser tests do not open, each shown under the strict Content-Security-Policy.

The ``page`` fixture fails any test whose pages break the policy; these pages must also still work.
"""

from playwright.sync_api import expect

from demo.catalog import demo_catalog_seed
from tests.browser.conftest import screenshot


def test_the_api_docs_render_their_operations(page):
    page.goto("/api/docs/")
    expect(page.get_by_text("/api/orders/").first).to_be_visible()
    screenshot(page, "api-docs")


def test_the_login_page_and_the_admin_pages_work(page, make_variant):
    demo_catalog_seed(staff_password="staff-pass-123")
    page.goto("/accounts/login/")
    expect(page.get_by_label("Username")).to_be_visible()
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("staff")
    page.get_by_label("Password").fill("staff-pass-123")
    page.get_by_role("button", name="Log in").click()
    page.goto("/admin/shop/productvariant/")
    page.get_by_role("link", name="SNEAKER-LTD").click()
    expect(page.get_by_label("Max per customer")).to_have_value("2")
    page.goto("/admin/shop/product/")
    page.get_by_role("link", name="Drop sneaker").click()
    expect(page.get_by_role("img", name="Blue drop sneaker, side view")).to_be_visible()  # the inline's thumbnail
    screenshot(page, "admin-product-change")
    page.get_by_role("link", name="Stock of its variants").click()
    expect(page.get_by_role("cell", name="DROP-SNEAKER-43")).to_be_visible()
    screenshot(page, "admin-product-stock")
    page.go_back()
    page.get_by_role("link", name="Make variants from options").click()
    expect(page.get_by_label("42")).to_be_visible()
    page.goto("/admin/shop/category/")
    expect(page.get_by_role("link", name="Shoes")).to_be_visible()  # the tree, its roots folded
    page.goto("/admin/shop/productvariant/add/")
    expect(page.get_by_label("Sale starts at")).to_have_count(0)  # a date and a time field instead
    expect(page.get_by_role("link", name="Today").first).to_be_visible()  # the admin's date widget ran
    screenshot(page, "admin-product-add")


def test_the_error_pages_work(page, db):
    page.goto("/products/NO-SUCH-SKU/")
    expect(page.get_by_role("heading").first).to_be_visible()
    page.goto("/accounts/login/")
    page.context.clear_cookies()  # the form goes without its CSRF cookie: Django's failure page, ours
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("pw-alice-123")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="This form could not be sent")).to_be_visible()
