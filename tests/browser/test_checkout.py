import re
from urllib.parse import parse_qs

import pytest
from django.core.signals import request_started
from playwright.sync_api import expect

from inventory.locks import lock_list, sku_locks
from orders.models import Order
from orders.services import order_place
from tests.browser.conftest import screenshot
from tests.conftest import assert_books_balance, stock_of
from tests.processes import wait_for


@pytest.fixture
def catalog(make_variant):
    variants = {
        "MUG": make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50"),
        "TEE": make_variant(sku="TEE", name="Black tee", stock=20, price="19.00"),
    }
    make_variant(sku="CAP", name="Navy cap", stock=0, price="22.00")
    return variants


def queued_on(sku: str) -> int:
    """Requests waiting for the SKU's lock, which this test holds."""
    return next((lock["waiters"] for lock in lock_list() if lock["sku"] == sku), 0)


def check_out(page, *, sku="MUG", name="Logo mug", quantity="2"):
    page.goto("/")
    page.get_by_role("link", name=name).click()
    page.get_by_label("Quantity").fill(quantity)
    page.get_by_role("button", name="Add to cart").click()
    expect(page.get_by_role("heading", name="Your cart")).to_be_visible()
    page.get_by_role("link", name="Check out").click()
    page.get_by_label("Email").fill("ann@example.com")


def test_browse_add_to_cart_check_out_see_the_countdown_and_pay(page, catalog, payments_worker):
    page.goto("/")
    expect(page.get_by_text("5 available")).to_be_visible()
    expect(page.get_by_text("Sold out")).to_be_visible()
    screenshot(page, "catalog")

    check_out(page)
    expect(page.get_by_text("reserves these items")).to_be_visible()
    screenshot(page, "checkout")
    page.get_by_test_id("place-order").click()

    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    expect(page.get_by_test_id("countdown")).to_have_text(re.compile(r"^1[45]:\d\d$"))
    screenshot(page, "order")
    assert stock_of(catalog["MUG"]).reserved == 2

    page.get_by_test_id("pay").click()  # to the provider's page
    expect(page.get_by_test_id("amount")).to_have_text("€25.00")
    page.get_by_role("link", name="Back to the order").click()
    expect(page.get_by_test_id("payment-processing")).to_be_visible()  # the shop waits for the provider
    screenshot(page, "payment-processing")
    page.get_by_test_id("continue-payment").click()
    screenshot(page, "local-provider")
    page.get_by_test_id("local-pay").click()

    # The webhook arrives from the worker; the order page refreshes itself until then.
    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=30_000)
    screenshot(page, "paid")
    assert (stock_of(catalog["MUG"]).on_hand, stock_of(catalog["MUG"]).reserved) == (3, 0)
    assert_books_balance(catalog["MUG"])


def test_a_declined_payment_gives_the_stock_back(page, catalog, payments_worker):
    check_out(page, quantity="5")
    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    assert stock_of(catalog["MUG"]).available == 0

    page.get_by_test_id("pay").click()
    page.get_by_test_id("local-decline").click()

    expect(page.get_by_test_id("status")).to_have_text("Payment failed", timeout=30_000)
    expect(page.get_by_test_id("payment-failed")).to_be_visible()
    screenshot(page, "payment-failed")
    wait_for(lambda: stock_of(catalog["MUG"]).available == 5, timeout=30, what="the worker to release the stock")
    page.goto("/")
    expect(page.get_by_text("5 available")).to_be_visible()
    assert_books_balance(catalog["MUG"])


@pytest.mark.parametrize(("javascript", "posts"), [(True, 1), (False, 2)], ids=["with-js", "without-js"])
def test_clicking_place_order_again_while_it_is_placed_makes_one_order(
    browser, live_server, transactional_db, catalog, javascript, posts
):
    """The second click comes while the first POST waits for the SKU's lock, as on a busy server.

    With JavaScript the disabled button sends nothing more. Without it both POSTs reach the server with
    the page's one key, and the shop places one order and shows it. (A double click sends one POST in
    Chromium, with JavaScript or without: the second submit replaces the first before it is sent.)
    """
    reached = []  # checkout POSTs that Django received

    def count(sender, environ, **kwargs):
        if (environ["REQUEST_METHOD"], environ["PATH_INFO"]) == ("POST", "/checkout/"):
            reached.append(environ["PATH_INFO"])

    context = browser.new_context(base_url=live_server.url, java_script_enabled=javascript)
    page = context.new_page()
    sent = []
    page.on(
        "request", lambda r: sent.append(r) if (r.method, r.url) == ("POST", f"{live_server.url}/checkout/") else None
    )
    check_out(page)
    # Clicked by position: while the POST is pending, a locator's click waits for its answer.
    page.get_by_test_id("place-order").scroll_into_view_if_needed()
    box = page.get_by_test_id("place-order").bounding_box()
    button = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    request_started.connect(count)
    try:
        with sku_locks(["MUG"]):
            page.mouse.click(*button)
            wait_for(lambda: queued_on("MUG") == 1, timeout=10, what="the first POST to wait for the lock")
            page.mouse.click(*button)
            wait_for(lambda: queued_on("MUG") == posts, timeout=10, what=f"{posts} POSTs to wait for the lock")
        expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    finally:
        request_started.disconnect(count)
    [order] = Order.objects.all()
    assert page.url == f"{live_server.url}/orders/{order.number}/"
    context.close()
    assert (len(sent), len(reached)) == (posts, posts)
    assert {parse_qs(request.post_data)["idempotency_key"][0] for request in sent} == {order.idempotency_key}
    assert stock_of(catalog["MUG"]).reserved == 2
    assert_books_balance(catalog["MUG"])


def test_insufficient_stock_explains_what_is_left(page, catalog):
    check_out(page, quantity="5")
    order_place(email="bob@example.com", items=[{"sku": "MUG", "quantity": 4}], idempotency_key="bob")
    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("shortage")).to_have_text(re.compile("Only 1 left"))
    assert Order.objects.count() == 1
