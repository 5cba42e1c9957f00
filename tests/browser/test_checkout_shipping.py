"""A checkout that ships, in a real browser: the address, the shipping methods and the totals they give,
the order placed and paid on the local provider's page, its email, on a phone and without JavaScript.

Figures (prices include German VAT, 19%): 2 x Logo mug at 12.50 = 25.00, holding 3.99 of tax. Standard
4.90 holds 0.78 (tax 4.77, total 29.90); Express 9.90 holds 1.58 (tax 5.57, total 34.90).
"""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from fulfilment.tasks import send_order_emails
from orders.models import Order
from tests.browser.conftest import screenshot
from tests.browser.test_phone_width import PHONE, assert_on_screen
from tests.conftest import ADDRESS_DE, assert_books_balance, stock_of
from tests.processes import wait_for

WEBHOOK_TIMEOUT = 30_000  # the worker delivers the provider's webhook, then the order page refreshes itself
STORED_ADDRESS_DE = {**ADDRESS_DE, "line2": "", "region": ""}  # as the shop keeps it: every field
ADDRESS_DE_LINES = ["Erika Mustermann", "Hauptstrasse 1", "10115 Berlin", "Germany", "+49 30 1234567"]


@pytest.fixture
def mug(make_variant, shipping_rules):
    return make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50", requires_shipping=True, weight_grams=400)


def to_checkout(page, *, quantity="2"):
    """As a guest: catalog, product, cart, checkout."""
    page.goto("/")
    page.get_by_role("link", name="Logo mug").click()
    page.get_by_label("Quantity").fill(quantity)
    page.get_by_role("button", name="Add to cart").click()
    expect(page.get_by_role("heading", name="Your cart")).to_be_visible()
    page.get_by_role("link", name="Check out").click()
    expect(page.get_by_role("heading", name="Checkout")).to_be_visible()


def address_fields(page) -> dict:
    """The shipping address's controls, found by their labels as a person finds them."""
    group = page.get_by_role("group", name="Shipping address")
    return {
        "full_name": group.get_by_role("textbox", name="Full name", exact=True),
        "line1": group.get_by_role("textbox", name="Address", exact=True),
        "city": group.get_by_role("textbox", name="City", exact=True),
        "postal_code": group.get_by_role("textbox", name="Postal code", exact=True),
        "phone": group.get_by_role("textbox", name="Phone (if any)", exact=True),
        "country": group.get_by_role("combobox", name="Country"),
    }


def fill_address(page, address: dict, *, country: str) -> None:
    """Every field but the country, then the country (with JavaScript, choosing it updates the totals)."""
    page.get_by_label("Email").fill("ann@example.com")
    fields = address_fields(page)
    for name in ("full_name", "line1", "city", "postal_code", "phone"):
        if address.get(name):
            fields[name].fill(address[name])
    fields["country"].select_option(label=country)


def method(page, name: str):
    return page.get_by_role("group", name="Shipping method").get_by_role("radio", name=name)


def expect_totals(page, *, subtotal: str, shipping: str, tax: str, total: str) -> None:
    for testid, figure in (("subtotal", subtotal), ("shipping", shipping), ("tax", tax), ("total", total)):
        expect(page.get_by_test_id(testid)).to_have_text(figure)


def posting_checkout(page):
    """Wait for the checkout form's answer (Update totals, Place order, or JavaScript's own submit)."""
    return page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith("/checkout/"))


def choose_method(page, name: str) -> None:
    """Tick a shipping method (with JavaScript the page updates its totals) and stay on the checkout."""
    with posting_checkout(page):
        method(page, name).click()
    expect(page, "choosing a method updates the totals; it must not place the order").to_have_url(
        re.compile(r"/checkout/$")
    )
    expect(method(page, name)).to_be_checked()


def test_a_guest_ships_to_germany_by_express_pays_and_is_emailed_the_totals(
    page, mug, shipping_rules, payments_worker, mailoutbox
):
    to_checkout(page)
    expect(page.get_by_test_id("subtotal")).to_have_text("€25.00")
    expect(page.get_by_test_id("shipping")).to_have_count(0)  # no country yet: no shipping price
    expect(page.get_by_role("group", name="Shipping method").get_by_role("radio")).to_have_count(0)

    with posting_checkout(page) as update:  # JavaScript updates the totals when the country is chosen
        fill_address(page, ADDRESS_DE, country="Germany")
    expect(page.locator(".messages li"), "choosing a country shows no error").to_have_text([])
    # JavaScript submits with the "Update totals" button: the shop must be told it is an update, not an order.
    assert "action=update" in update.value.request.post_data, update.value.request.post_data
    expect(method(page, "Standard: €4.90")).to_be_checked()  # the cheapest, priced
    expect(method(page, "Express: €9.90")).not_to_be_checked()
    radios = page.get_by_role("group", name="Shipping method").get_by_role("radio")
    expect(radios).to_have_count(2)
    expect(radios.first).to_have_accessible_name("Standard: €4.90")  # cheapest first
    expect_totals(page, subtotal="€25.00", shipping="€4.90", tax="€4.77", total="€29.90")
    expect(page.get_by_label("Email")).to_have_value("ann@example.com")  # kept across the update
    expect(address_fields(page)["city"]).to_have_value("Berlin")
    expect(page.get_by_label("Bill to the shipping address")).to_be_checked()
    screenshot(page, "shipping-checkout-standard")

    choose_method(page, "Express: €9.90")
    assert not Order.objects.exists()
    expect(page.get_by_role("row", name="Shipping (Express)")).to_be_visible()
    expect_totals(page, subtotal="€25.00", shipping="€9.90", tax="€5.57", total="€34.90")
    screenshot(page, "shipping-checkout-express")

    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    order = Order.objects.get()
    assert (order.email, order.shipping_method_name, order.shipping_method_id) == (
        "ann@example.com",
        "Express",
        shipping_rules["express"].pk,
    )
    assert (order.subtotal, order.shipping_price, order.tax, order.total) == (
        Decimal("25.00"),
        Decimal("9.90"),
        Decimal("5.57"),
        Decimal("34.90"),
    )
    assert order.shipping_address == STORED_ADDRESS_DE and order.billing_address is None
    assert stock_of(mug).reserved == 2
    assert send_order_emails() == 1  # the beat task's sweep: the "placed" email

    page.get_by_test_id("pay").click()
    expect(page.get_by_test_id("amount")).to_have_text("€34.90")
    screenshot(page, "shipping-local-provider")
    page.get_by_test_id("local-pay").click()

    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=WEBHOOK_TIMEOUT)
    expect(page.get_by_role("row", name="Shipping (Express)")).to_be_visible()
    expect_totals(page, subtotal="€25.00", shipping="€9.90", tax="€5.57", total="€34.90")
    shipping_to = page.get_by_test_id("order-shipping-address")
    for line in ADDRESS_DE_LINES:
        expect(shipping_to).to_contain_text(line)
    expect(page.get_by_role("heading", name="Billing address")).to_be_visible()
    screenshot(page, "shipping-paid")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.total == Decimal("34.90")
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)

    # The next sweep sends the "paid" email; each lists the address, the method and the totals.
    assert send_order_emails() == 1
    assert [message.subject for message in mailoutbox] == [
        f"Order {order.number}: your items are reserved",
        f"Order {order.number}: paid, thank you",
    ]
    for message in mailoutbox:
        assert message.to == ["ann@example.com"]
        text = message.body
        for figure in (
            "2 x Logo mug (MUG) at €12.50 = €25.00",
            "Subtotal: €25.00",
            "Shipping (Express): €9.90",
            "Included tax: €5.57",
            "Total: €34.90",
            "Shipping to:",
            *ADDRESS_DE_LINES,
        ):
            assert figure in text, (message.subject, figure, text)
        [(html, _)] = message.alternatives
        for figure in ("Shipping (Express)", "€9.90", "€5.57", "€34.90", "Erika Mustermann", "10115 Berlin"):
            assert figure in html, (message.subject, figure)


def on_screen(locator) -> None:
    """Scrolled into view, shown, and within the phone's width."""
    locator.scroll_into_view_if_needed()
    assert_on_screen(locator)


def test_a_guest_checks_out_and_pays_on_a_phone(page, mug, shipping_rules, payments_worker):
    page.set_viewport_size(PHONE)
    to_checkout(page)
    on_screen(page.get_by_label("Email"))
    for field in address_fields(page).values():
        on_screen(field)
    with posting_checkout(page):
        fill_address(page, ADDRESS_DE, country="Germany")

    for name in ("Standard: €4.90", "Express: €9.90"):
        on_screen(method(page, name))
    choose_method(page, "Express: €9.90")
    expect(page.get_by_test_id("total")).to_have_text("€34.90")
    for control in (
        page.get_by_label("Email"),
        *address_fields(page).values(),
        page.get_by_label("Bill to the shipping address"),
        method(page, "Standard: €4.90"),
        method(page, "Express: €9.90"),
        page.get_by_test_id("total"),
        page.get_by_role("button", name="Update totals"),
        page.get_by_test_id("place-order"),
    ):
        on_screen(control)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "shipping-checkout-phone")

    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    on_screen(page.get_by_test_id("pay"))
    on_screen(page.get_by_test_id("order-shipping-address"))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.get_by_test_id("pay").click()
    on_screen(page.get_by_test_id("local-pay"))
    page.get_by_test_id("local-pay").click()
    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=WEBHOOK_TIMEOUT)
    screenshot(page, "shipping-paid-phone")
    order = Order.objects.get()
    assert (order.status, order.shipping_method_name, order.total) == (Order.Status.PAID, "Express", Decimal("34.90"))


def test_a_country_no_zone_covers_is_refused_beside_the_country_and_places_nothing(page, mug, shipping_rules):
    to_checkout(page)
    with posting_checkout(page):
        fill_address(page, ADDRESS_DE, country="Japan")

    error = page.get_by_test_id("error-shipping-country")
    expect(error).to_have_text("We do not ship to Japan.")
    # Beside the country: the next thing after the country's own label, in the shipping address.
    beside = page.get_by_role("group", name="Shipping address").locator(
        "label:has(select[name='shipping-country']) + [data-testid='error-shipping-country']"
    )
    expect(beside).to_have_text("We do not ship to Japan.")
    expect(address_fields(page)["country"]).to_have_value("JP")  # the choice is kept, to be changed
    expect(page.get_by_role("group", name="Shipping method").get_by_role("radio")).to_have_count(0)
    screenshot(page, "shipping-japan")

    with posting_checkout(page):
        page.get_by_test_id("place-order").click()
    expect(page.get_by_role("heading", name="Checkout")).to_be_visible()
    expect(page.get_by_test_id("error-shipping-country")).to_have_text("We do not ship to Japan.")
    assert Order.all_objects.count() == 0
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 0)
    assert_books_balance(mug)


def test_a_declined_payment_is_tried_again_from_the_order_page_and_paid(page, mug, shipping_rules, payments_worker):
    to_checkout(page)
    with posting_checkout(page):
        fill_address(page, ADDRESS_DE, country="Germany")
    expect(page.get_by_test_id("total")).to_have_text("€29.90")
    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    order = Order.objects.get()

    page.get_by_test_id("pay").click()
    expect(page.get_by_test_id("amount")).to_have_text("€29.90")
    page.get_by_test_id("local-decline").click()
    expect(page.get_by_test_id("status")).to_have_text("Payment failed", timeout=WEBHOOK_TIMEOUT)
    expect(page.get_by_test_id("payment-failed")).to_be_visible()
    try_again = page.get_by_test_id("try-again")
    expect(try_again).to_have_text("Try again: pay €29.90")
    expect(page.get_by_test_id("back-to-cart")).to_be_visible()
    screenshot(page, "shipping-payment-failed")

    try_again.click()  # at once, as a buyer does: the worker may not have released the stock yet
    expect(page.get_by_test_id("amount")).to_have_text("€29.90")
    page.get_by_test_id("local-pay").click()
    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=WEBHOOK_TIMEOUT)
    expect(page.get_by_test_id("total")).to_have_text("€29.90")
    screenshot(page, "shipping-paid-after-retry")

    order.refresh_from_db()
    assert (order.status, order.total, order.shipping_method_name) == (Order.Status.PAID, Decimal("29.90"), "Standard")
    assert list(order.payments.values_list("state", flat=True).order_by("attempt")) == ["failed", "captured"]
    # The first failure's release task may still be on its way: the books must balance once it has run.
    wait_for(
        lambda: (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0),
        timeout=30,
        what="the paid order's 2 units committed and nothing left reserved",
    )
    assert_books_balance(mug)


def test_without_javascript_update_totals_shows_the_methods_and_the_one_chosen_is_placed(
    browser, live_server, transactional_db, mug, shipping_rules
):
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        to_checkout(page)
        fill_address(page, ADDRESS_DE, country="Germany")  # nothing happens until the buyer asks
        expect(page.get_by_role("group", name="Shipping method")).to_contain_text("Choose the country")
        expect(page.get_by_role("group", name="Shipping method").get_by_role("radio")).to_have_count(0)

        with posting_checkout(page):
            page.get_by_role("button", name="Update totals").click()
        expect(method(page, "Standard: €4.90")).to_be_checked()
        expect(method(page, "Express: €9.90")).to_be_visible()
        expect_totals(page, subtotal="€25.00", shipping="€4.90", tax="€4.77", total="€29.90")
        expect(page.get_by_label("Email")).to_have_value("ann@example.com")
        screenshot(page, "shipping-checkout-no-js")

        method(page, "Express: €9.90").check()
        page.get_by_test_id("place-order").click()
        expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
        expect(page.get_by_role("row", name="Shipping (Express)")).to_be_visible()
        expect(page.get_by_test_id("total")).to_have_text("€34.90")
        expect(page.get_by_test_id("pay")).to_have_text("Pay €34.90")
        screenshot(page, "shipping-order-no-js")
    finally:
        context.close()
    order = Order.objects.get()
    assert (order.shipping_method_id, order.shipping_method_name, order.shipping_price, order.total) == (
        shipping_rules["express"].pk,
        "Express",
        Decimal("9.90"),
        Decimal("34.90"),
    )
    assert order.shipping_address == STORED_ADDRESS_DE
    assert stock_of(mug).reserved == 2
    assert_books_balance(mug)
