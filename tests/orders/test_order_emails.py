"""Order emails, sent by the beat task through a real SMTP server that the test starts (aiosmtpd)."""

import re
import time
from datetime import timedelta
from unittest import mock
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from fulfilment.tasks import send_order_emails
from orders.links import order_link
from orders.models import Order, OrderEmail
from orders.services import order_expire, order_place
from payments.services import order_pay, order_refund
from tests.conftest import pay
from tests.orders.services.test_payment_flow import succeed
from tests.smtp import html_of, text_of

pytestmark = pytest.mark.django_db


def place(key: str, quantity: int = 2) -> Order:
    return order_place(email=f"{key}@example.com", items=[{"sku": "MUG", "quantity": quantity}], idempotency_key=key)


def test_a_placed_order_is_emailed_once_with_its_deadline_and_a_link_to_pay(make_variant, inbox):
    make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    order = place("ann")

    assert send_order_emails() == 1
    assert send_order_emails() == 0  # once

    [message] = inbox.take()
    assert message["To"] == "ann@example.com" and message["X-Envelope-To"] == "ann@example.com"
    assert message["Subject"] == f"Order {order.number}: your items are reserved"
    body = text_of(message)
    deadline = timezone.localtime(order.expires_at).strftime("%-d %b %Y, %H:%M UTC")  # as the pages write it
    assert order.number in body and deadline in body
    assert "2 x Logo mug (MUG) at €12.50 = €25.00" in body and "Total: €25.00" in body
    assert order.number in html_of(message) and deadline in html_of(message)
    link = re.search(r"http://\S+/orders/" + order.number + r"/\?key=\S+", body).group(0)
    browser = Client()  # another browser than the one that ordered: the signed link lets it in
    opened = browser.get(link.removeprefix("http://127.0.0.1:8000"), follow=True)
    assert opened.status_code == 200 and order.number in opened.content.decode()
    assert Client().get(f"/orders/{order.number}/?key=forged").status_code == 404


def test_paid_failed_expired_and_refunded_orders_each_get_their_email(make_variant, inbox, staff_user):
    make_variant(sku="MUG", stock=10)
    paid, failed, expired, refunded = place("paid"), place("failed"), place("expired"), place("refunded")
    send_order_emails()
    inbox.take()  # the four "placed" emails

    pay(paid)
    pay(failed, decline=True)
    Order.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    order_expire(order=expired)
    order_refund(order=pay(refunded), restock=True, actor=staff_user)
    assert send_order_emails() == 4

    subjects = {message["To"]: message["Subject"] for message in inbox.take()}
    assert subjects == {
        "paid@example.com": f"Order {paid.number}: paid, thank you",
        "failed@example.com": f"Order {failed.number}: the payment failed",
        "expired@example.com": f"Order {expired.number}: the reservation expired",
        "refunded@example.com": f"Order {refunded.number}: refunded",
    }
    assert OrderEmail.objects.count() == 7 and send_order_emails() == 0  # a refund is emailed per refund


def test_a_payment_that_came_too_late_is_refunded_and_the_buyer_told(make_variant, inbox, bob):
    make_variant(sku="MUG", stock=2)
    order = place("late")
    payment = order_pay(order=order, return_url="http://testserver/")
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    order_expire(order=order)
    order_place(customer=bob, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="bob")
    succeed(payment)  # the stock is gone: refunded

    send_order_emails()

    messages = {message["Subject"]: message for message in inbox.take() if message["To"] == "late@example.com"}
    late = messages[f"Order {order.number}: your payment came too late and was refunded"]
    assert "refunded it in full" in text_of(late) and order.number in text_of(late)


def link_path(order: Order, *, signed_ago: float = 0) -> str:
    """The path (with its key) of the order's emailed link, as it was signed ``signed_ago`` seconds ago."""
    with mock.patch("django.core.signing.time.time", return_value=time.time() - signed_ago):
        link = urlsplit(order_link(order))
    return f"{link.path}?{link.query}"


def test_an_expired_order_link_is_refused_and_shows_nothing_of_the_order(make_variant, settings):
    settings.ORDER_LINK_MAX_AGE_SECONDS = 3600
    make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    order = place("ann")

    browser = Client()
    opened = browser.get(link_path(order, signed_ago=3600 + 60), follow=True)

    assert opened.status_code == 410 and "link has expired" in opened.content.decode()
    assert "Logo mug" not in opened.content.decode() and "25.00" not in opened.content.decode()
    assert browser.get(f"/orders/{order.number}/").status_code == 404  # nor did it let this browser in
    assert browser.get(link_path(order, signed_ago=3600 - 60)).status_code == 200  # a link not yet expired opens


def test_an_order_link_shows_a_guest_order_but_cannot_pay_or_cancel_it(make_variant):
    make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    order = place("ann")

    browser = Client()  # another browser than the one that ordered
    opened = browser.get(link_path(order), follow=True)

    page = opened.content.decode()
    assert opened.status_code == 200 and order.number in page and "Logo mug" in page
    refused = [browser.post(f"/orders/{order.number}/{action}/").status_code for action in ("pay", "cancel")]
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT and not order.payments.exists()
    assert refused == [404, 404]  # as for any stranger
    assert browser.get(f"/orders/{order.number}/").status_code == 404  # the link lets it see, not in
    assert 'data-testid="pay"' not in page and "Cancel order" not in page  # nor offers what it cannot do


def test_an_account_orders_link_leads_to_the_login_page_then_the_order(make_variant, customer):
    make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="alice")
    detail = f"/orders/{order.number}/"

    browser = Client()
    opened = browser.get(link_path(order))

    assert opened.status_code == 302 and opened["Location"] == f"/accounts/login/?next={detail}"
    assert browser.get(detail).status_code == 404  # nothing shown before the login
    logged_in = browser.post(
        opened["Location"], {"username": "alice", "password": "pw-alice-123", "next": detail}, follow=True
    )
    assert logged_in.redirect_chain[-1][0] == detail
    assert logged_in.status_code == 200 and "Logo mug" in logged_in.content.decode()
    assert 'data-testid="pay"' in logged_in.content.decode()  # the account that owns it may pay
