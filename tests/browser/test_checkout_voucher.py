"""A voucher code at checkout, in a real browser: refused with its reason, applied to the summary, then in
the order, its email and the amount paid on the provider's page.

Figures: 2 x Logo mug at 12.50 = 25.00; DROP20 takes 20% off: 5.00, total 20.00 (no tax, not shipped).
"""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from fulfilment.tasks import send_order_emails
from orders.models import Order
from tests.browser.conftest import screenshot
from tests.browser.test_checkout_shipping import WEBHOOK_TIMEOUT, to_checkout
from tests.conftest import assert_books_balance, assert_voucher_books, stock_of
from vouchers.models import Voucher


@pytest.fixture
def mug(make_variant):
    return make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50")


def apply_code(page, code: str) -> None:
    page.get_by_label("Voucher code").fill(code)
    page.get_by_test_id("apply-voucher").click()
    expect(page.get_by_role("heading", name="Checkout")).to_be_visible()


def test_a_code_applied_at_checkout_is_in_the_summary_the_email_and_the_amount_paid(
    page, mug, make_voucher, payments_worker, mailoutbox
):
    voucher = make_voucher(code="DROP20", value="20", usage_limit=100, limit_per_customer=1)
    to_checkout(page)
    page.get_by_label("Email").fill("ann@example.com")

    apply_code(page, "nope")
    expect(page.get_by_test_id("error-voucher")).to_have_text("There is no such voucher.")
    expect(page.get_by_test_id("total")).to_have_text("€25.00")

    apply_code(page, "drop20")
    expect(page.get_by_test_id("error-voucher")).to_have_count(0)
    expect(page.get_by_test_id("discount")).to_have_text("−€5.00")
    expect(page.get_by_test_id("total")).to_have_text("€20.00")
    expect(page.get_by_label("Email")).to_have_value("ann@example.com")  # kept across the update
    screenshot(page, "voucher-checkout")
    assert not Order.objects.exists()

    page.get_by_test_id("place-order").click()
    expect(page.get_by_test_id("status")).to_have_text("Awaiting payment")
    expect(page.get_by_test_id("discount")).to_have_text("−€5.00")
    expect(page.get_by_test_id("total")).to_have_text("€20.00")
    order = Order.objects.get()
    assert (order.voucher_code, order.discount, order.total) == ("DROP20", Decimal("5.00"), Decimal("20.00"))
    assert send_order_emails() == 1
    [placed] = mailoutbox
    assert "Voucher DROP20: -€5.00" in placed.body and "Total: €20.00" in placed.body
    [(html, _)] = placed.alternatives
    assert "Voucher DROP20" in html and "€20.00" in html

    page.get_by_test_id("pay").click()
    expect(page.get_by_test_id("amount")).to_have_text("€20.00")  # the provider is asked for the discounted total
    page.get_by_test_id("local-pay").click()
    expect(page.get_by_test_id("status")).to_have_text("Paid", timeout=WEBHOOK_TIMEOUT)
    screenshot(page, "voucher-paid")

    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.payments.get().amount == Decimal("20.00")
    voucher = Voucher.objects.get(pk=voucher.pk)
    assert (voucher.uses_reserved, voucher.uses_committed) == (0, 1)
    assert_voucher_books(voucher)
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)
