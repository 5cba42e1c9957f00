from playwright.sync_api import expect

from demo.catalog import demo_catalog_seed
from inventory.models import StockMovement
from tests.browser.conftest import screenshot
from tests.conftest import assert_books_balance, stock_of


def test_a_staff_user_edits_stock_in_the_admin_and_sees_the_movement(page, make_variant):
    demo_catalog_seed(staff_password="staff-pass-123")  # the staff user `seed_demo` creates, with its permissions
    mug = make_variant(sku="MUG", name="Logo mug", stock=10)
    stock = stock_of(mug)

    page.goto("/admin/login/")
    page.get_by_label("Username").fill("staff")
    page.get_by_label("Password").fill("staff-pass-123")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"/admin/inventory/stock/{stock.pk}/change/")
    page.locator("input[name=new_on_hand]").fill("25")
    page.locator("[name=reason]").fill("Stock count after delivery")
    page.get_by_role("button", name="Save", exact=True).click()

    page.goto(f"/admin/inventory/stock/{stock.pk}/change/")
    expect(page.get_by_text("Stock count after delivery").first).to_be_visible()
    screenshot(page, "admin-stock")

    assert stock_of(mug).on_hand == 25
    movement = StockMovement.objects.filter(stock=stock, kind="adjust").get()
    assert (movement.on_hand_delta, movement.actor.username) == (15, "staff")
    assert_books_balance(mug)
