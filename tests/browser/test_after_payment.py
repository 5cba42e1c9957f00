"""After the payment, in a real browser: a buyer signs up, verifies the email, keeps an address, checks out
with it and pays; staff ship part of the order and refund one line in the admin; the buyer sees the
tracking and the refund on the order page."""

import pytest
from playwright.sync_api import expect

from accounts.models import Account
from accounts.services import account_verification_token
from orders.models import Order
from tests.browser.conftest import screenshot
from tests.conftest import ADDRESS_DE, assert_books_balance, stock_of

WEBHOOK_TIMEOUT = 30_000
PASSWORD = "a-long-passphrase-42"


@pytest.fixture
def goods(make_variant, shipping_rules):
    mug = make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50", requires_shipping=True, weight_grams=400)
    tee = make_variant(sku="TEE", name="Black tee", stock=5, price="20.00", requires_shipping=True, weight_grams=200)
    return {"mug": mug, "tee": tee}


def add(page, name: str, quantity: str) -> None:
    page.goto("/")
    page.get_by_role("link", name=name).click()
    page.get_by_label("Quantity").fill(quantity)
    page.get_by_role("button", name="Add to cart").click()
    expect(page.get_by_role("heading", name="Your cart")).to_be_visible()


def test_sign_up_verify_check_out_with_a_saved_address_then_shipped_in_part_and_a_line_refunded(
    page, browser, live_server, goods, shipping_rules, payments_worker, shop_staff
):
    page.goto("/")
    page.get_by_role("link", name="Sign up").click()
    page.get_by_label("Username").fill("ann")
    page.get_by_label("Email").fill("ann@example.com")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_test_id("signup").click()
    expect(page.get_by_test_id("signup-done")).to_contain_text("ann@example.com")
    # The worker emails the link (tests/accounts read it there); the browser opens the same link.
    page.goto(f"/accounts/verify/{account_verification_token(account=Account.objects.get(email='ann@example.com'))}/")
    page.get_by_label("Your password").fill(PASSWORD)
    page.get_by_test_id("verify").click()
    expect(page.get_by_text("Your email address is confirmed")).to_be_visible()
    screenshot(page, "account-verified")

    page.get_by_test_id("add-address").click()
    for label, field in (("Full name", "full_name"), ("Address", "line1"), ("City", "city")):
        page.get_by_role("textbox", name=label, exact=True).fill(ADDRESS_DE[field])
    page.get_by_role("textbox", name="Postal code", exact=True).fill(ADDRESS_DE["postal_code"])
    page.get_by_role("combobox", name="Country").select_option(label="Germany")
    page.get_by_test_id("save-address").click()
    expect(page.get_by_test_id("address")).to_contain_text("Default shipping address")

    add(page, "Logo mug", "2")
    add(page, "Black tee", "1")
    page.get_by_role("link", name="Check out").click()
    shipping = page.get_by_role("group", name="Shipping address")
    expect(shipping.get_by_role("textbox", name="Address", exact=True)).to_have_value(ADDRESS_DE["line1"])
    expect(shipping.get_by_role("combobox", name="Country")).to_have_value("DE")
    page.get_by_role("button", name="Update totals").click()
    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    page.get_by_test_id("pay").click()
    page.get_by_test_id("local-pay").click()
    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=WEBHOOK_TIMEOUT)
    order = Order.objects.get()
    assert order.customer.username == "ann" and order.shipping_address["city"] == "Berlin"

    staff = browser.new_context(base_url=live_server.url).new_page()
    staff.goto("/admin/login/")
    staff.get_by_label("Username").fill(shop_staff.username)
    staff.get_by_label("Password").fill("pw-stan-123")
    staff.get_by_role("button", name="Log in").click()
    staff.goto(f"/admin/orders/order/{order.pk}/change/")
    staff.get_by_test_id("ship").click()
    staff.get_by_label("Carrier").fill("DHL")
    staff.get_by_label("Tracking number").fill("00340434161094015902")
    staff.get_by_label("Black tee (TEE)").fill("0")  # the mugs now, the tee later
    staff.get_by_role("button", name="Ship").click()
    expect(staff.locator(".messagelist")).to_contain_text("shipment recorded")

    page.reload()
    expect(page.get_by_test_id("status")).to_have_text("Partially shipped")
    expect(page.get_by_test_id("tracking-number")).to_have_text("00340434161094015902")
    screenshot(page, "order-partially-shipped")

    staff.goto(f"/admin/orders/order/{order.pk}/change/")
    staff.get_by_test_id("refund").click()
    staff.get_by_label("Black tee (TEE)").fill("1")
    staff.get_by_label("Put the units back on hand").check()
    staff.get_by_role("button", name="Refund").click()
    expect(staff.locator(".messagelist")).to_contain_text("€20.00 refunded in all")

    page.reload()
    refunds = page.get_by_test_id("refunds")
    expect(refunds).to_contain_text("€20.00 of €")
    expect(refunds.get_by_test_id("refund")).to_contain_text("1 x Black tee")
    screenshot(page, "order-line-refunded")
    order.refresh_from_db()
    # The unshipped tee was refunded, so everything left to deliver has gone: the order reads shipped.
    assert (order.status, order.amount_refunded) == (Order.Status.SHIPPED, 20)
    assert stock_of(goods["tee"]).on_hand == 5 and stock_of(goods["mug"]).on_hand == 3
    assert_books_balance(goods["mug"], goods["tee"])
