"""The web checkout with Django's test client (the browser tests drive the same pages in Chromium)."""

import re
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.shipping import UNPRICED_ORDER
from core.db import LOST_CONNECTION
from inventory.errors import LockTimeout, LockUnavailable
from orders.models import Order, new_order_number
from orders.services import order_expire, order_place
from payments.models import Payment
from payments.providers.local import local_event
from tests.conftest import assert_books_balance, stock_of, webhook_deliver

pytestmark = pytest.mark.django_db


@pytest.fixture
def mug(make_variant):
    return make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50")


def add_to_cart(client, sku, quantity=1):
    return client.post(f"/cart/add/{sku}/", {"quantity": quantity})


def form_key(page: str) -> str:
    return re.search(r'name="idempotency_key" value="([0-9a-f]+)"', page).group(1)


def checkout_key(client):
    return form_key(client.get("/checkout/").content.decode())


def test_catalog_variant_and_cart_pages(client, mug, make_variant):
    make_variant(sku="TEE", name="Black tee", stock=0)
    catalog = client.get("/").content.decode()
    assert "Logo mug" in catalog and "5 available" in catalog and "Sold out" in catalog
    assert "Logo mug" in client.get("/products/mug/").content.decode()
    assert client.get("/products/NOPE/").status_code == 404

    assert add_to_cart(client, "MUG", 2).status_code == 302
    cart = client.get("/cart/").content.decode()
    assert "Logo mug" in cart and "25.00" in cart
    client.post("/cart/update/MUG/", {"quantity": 0})
    assert "Your cart is empty" in client.get("/cart/").content.decode()
    assert stock_of(mug).reserved == 0  # a cart reserves nothing


def test_guest_checkout_reserves_and_shows_the_order_with_a_countdown(client, mug):
    add_to_cart(client, "MUG", 2)
    checkout = client.get("/checkout/").content.decode()
    assert "reserves these items" in checkout and "25.00" in checkout

    response = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})

    order = Order.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/orders/{order.number}/"
    page = client.get(response["Location"]).content.decode()
    assert "Awaiting payment" in page and 'data-expires-at="' in page
    assert stock_of(mug).reserved == 2
    assert order.number in client.get("/orders/").content.decode()


def test_a_guest_needs_an_email(client, mug):
    add_to_cart(client, "MUG")
    response = client.post("/checkout/", {"email": "", "idempotency_key": checkout_key(client)})
    assert "Give an email address" in response.content.decode()
    assert not Order.objects.exists()


def test_submitting_the_checkout_twice_places_one_order(client, mug):
    add_to_cart(client, "MUG", 2)
    form = {"email": "ann@example.com", "idempotency_key": checkout_key(client)}
    first = client.post("/checkout/", form)
    second = client.post("/checkout/", form)  # the cart is empty by now: the page's key finds the order
    assert first["Location"] == second["Location"] == f"/orders/{Order.objects.get().number}/"
    assert Order.objects.count() == 1 and stock_of(mug).reserved == 2


def test_a_checkout_key_from_another_browser_is_refused(client, mug):
    add_to_cart(client, "MUG", 1)
    form = {"email": "ann@example.com", "idempotency_key": checkout_key(client)}
    client.post("/checkout/", form)
    other = client.__class__()
    add_to_cart(other, "MUG", 1)
    checkout_key(other)
    page = other.post("/checkout/", form)  # same email and key, but the key was not issued to this browser
    assert "This checkout page has expired" in page.content.decode()
    assert other.get(f"/orders/{Order.objects.get().number}/").status_code == 404


def test_a_variant_no_longer_for_sale_leaves_the_cart_with_a_message(client, mug, make_variant):
    tee = make_variant(sku="TEE", name="Black tee", stock=5)
    add_to_cart(client, "MUG", 1)
    add_to_cart(client, "TEE", 1)
    tee.is_active = False
    tee.save()
    page = client.get("/cart/").content.decode()
    assert "Black tee is no longer for sale" in page and 'href="/products/TEE/"' not in page
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    assert [line.variant.sku for line in Order.objects.get().lines.all()] == ["MUG"]


def test_insufficient_stock_says_per_line_what_is_left(client, mug, make_variant):
    make_variant(sku="CAP", name="Navy cap", stock=10)
    add_to_cart(client, "MUG", 5)
    add_to_cart(client, "CAP", 1)
    client.post("/cart/update/MUG/", {"quantity": 5})
    other = client.__class__()
    add_to_cart(other, "MUG", 3)
    other.post("/checkout/", {"email": "bob@example.com", "idempotency_key": checkout_key(other)})

    page = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})

    text = page.content.decode()
    assert "Not enough stock" in text and "Only 2 left" in text
    assert text.count('data-testid="shortage"') == 1  # the cap is fine
    assert Order.objects.count() == 1


def test_a_definite_refusal_gives_the_page_a_fresh_key(client, mug):
    add_to_cart(client, "MUG", 5)
    key = checkout_key(client)
    other = client.__class__()
    add_to_cart(other, "MUG", 1)
    other.post("/checkout/", {"email": "bob@example.com", "idempotency_key": checkout_key(other)})
    page = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key}).content.decode()
    assert "Not enough stock" in page
    assert form_key(page) != key  # nothing was placed: the next submit is a new request
    assert Order.objects.count() == 1  # bob's


def placed_then(failure):
    """An order_place that places the order and then fails, as if its answer was lost on the way back."""

    def place(**kwargs):
        order_place(**kwargs)
        raise failure

    return place


def failing(failure):
    def place(**kwargs):
        raise failure

    return place


UNKNOWN_OUTCOMES = {
    "lock_timeout": LockTimeout("The outcome of this request is unknown; retry with the same key"),
    "lock_unavailable": LockUnavailable(),
    "connection_lost": OperationalError(LOST_CONNECTION, "Lost connection to server during query"),
}


@pytest.mark.parametrize("failure", UNKNOWN_OUTCOMES.values(), ids=UNKNOWN_OUTCOMES.keys())
def test_after_an_unknown_outcome_the_page_keeps_its_key_and_a_second_click_places_one_order(
    client, mug, monkeypatch, failure
):
    add_to_cart(client, "MUG", 2)
    key = checkout_key(client)
    monkeypatch.setattr("orders.views.order_place", placed_then(failure))
    first = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})

    page = first.content.decode()
    assert form_key(page) == key
    assert first.status_code == 200 and "could not confirm your order" in page
    assert client.session["cart"] == {"MUG": 2}  # nothing confirmed, so nothing cleared
    monkeypatch.undo()

    second = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": form_key(page)})

    order = Order.objects.get()
    assert second["Location"] == f"/orders/{order.number}/"
    assert client.get(second["Location"]).status_code == 200  # remembered as this browser's order
    assert "cart" not in client.session
    assert stock_of(mug).reserved == 2
    assert_books_balance(mug)


def test_a_guest_who_changes_email_after_an_unknown_outcome_still_gets_one_order(client, mug, monkeypatch):
    add_to_cart(client, "MUG", 2)
    key = checkout_key(client)
    monkeypatch.setattr("orders.views.order_place", placed_then(LockTimeout.outcome_unknown(skus=["MUG"])))
    page = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key}).content.decode()
    monkeypatch.undo()

    # A guest's key is scoped by email: with another address the same key would be a new request.
    second = client.post("/checkout/", {"email": "bob@example.com", "idempotency_key": form_key(page)})

    order = Order.objects.get()
    assert order.email == "ann@example.com"
    assert second["Location"] == f"/orders/{order.number}/"
    assert stock_of(mug).reserved == 2


def test_after_a_lock_timeout_that_placed_nothing_the_second_click_places_the_order(client, mug, monkeypatch):
    add_to_cart(client, "MUG", 2)
    key = checkout_key(client)
    monkeypatch.setattr("orders.views.order_place", failing(LockTimeout()))
    page = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key}).content.decode()
    assert form_key(page) == key and not Order.objects.exists()
    monkeypatch.undo()

    second = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})

    assert second["Location"] == f"/orders/{Order.objects.get().number}/"
    assert stock_of(mug).reserved == 2


def test_a_cart_changed_after_an_unknown_outcome_shows_the_placed_order_and_places_nothing_more(
    client, mug, make_variant, monkeypatch
):
    make_variant(sku="CAP", name="Navy cap", stock=10)
    add_to_cart(client, "MUG", 2)
    key = checkout_key(client)
    monkeypatch.setattr("orders.views.order_place", placed_then(LockTimeout()))
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})
    monkeypatch.undo()
    add_to_cart(client, "CAP", 1)  # in another tab, before clicking again

    response = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})

    order = Order.objects.get()
    page = response.content.decode()
    assert f"placed order {order.number}" in page
    assert form_key(page) != key  # the cart as it is now would be a new order
    assert client.session["cart"] == {"MUG": 2, "CAP": 1}
    assert client.get(f"/orders/{order.number}/").status_code == 200
    again = client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})
    assert again["Location"] == f"/orders/{order.number}/" and Order.objects.count() == 1


def test_a_database_error_that_is_not_a_lost_connection_is_not_taken_for_an_unknown_outcome(client, mug, monkeypatch):
    add_to_cart(client, "MUG", 1)
    key = checkout_key(client)
    monkeypatch.setattr("orders.views.order_place", failing(OperationalError(1054, "Unknown column")))
    with pytest.raises(OperationalError):
        client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": key})


@pytest.mark.django_db(transaction=True)
def test_pay_or_decline_on_the_local_providers_page_and_cancel_from_the_order_page(
    client, mug, celery_eager, local_webhooks
):
    numbers = []
    for _ in range(3):
        add_to_cart(client, "MUG", 1)
        client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
        numbers.append(Order.objects.latest("id").number)
    paid, failed, cancelled = numbers

    for number, outcome in ((paid, "pay"), (failed, "decline")):
        to_provider = client.post(f"/orders/{number}/pay/")
        provider_page = to_provider["Location"]
        assert re.fullmatch(r"/payments/local/cs_local_[0-9a-f]{24}/", provider_page)
        assert client.post(f"/orders/{number}/pay/")["Location"] == provider_page  # a second click: same payment
        processing = client.get(f"/orders/{number}/").content.decode()
        assert "Payment processing" in processing and provider_page in processing
        assert "Pay €12.50" in client.get(provider_page).content.decode()
        assert client.post(provider_page, {"outcome": outcome})["Location"] == f"/orders/{number}/"
    client.post(f"/orders/{cancelled}/cancel/")

    assert local_webhooks == [200, 200]  # each outcome reached the shop as a signed webhook
    assert "Paid" in client.get(f"/orders/{paid}/").content.decode()
    assert "The payment failed" in client.get(f"/orders/{failed}/").content.decode()
    assert "Cancelled" in client.get(f"/orders/{cancelled}/").content.decode()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (4, 0)
    assert_books_balance(mug)


def test_while_a_charge_awaits_applying_the_page_says_processing_and_offers_no_second_payment(client, mug):
    add_to_cart(client, "MUG")
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    number = Order.objects.get().number
    client.post(f"/orders/{number}/pay/")
    Payment.objects.update(state=Payment.State.CHARGED)  # the provider took the money; the stock lock is busy

    page = client.get(f"/orders/{number}/").content.decode()
    again = client.post(f"/orders/{number}/pay/")

    assert "Payment processing" in page and 'data-testid="pay"' not in page and "Continue to payment" not in page
    assert again["Location"] == f"/orders/{number}/" and Payment.objects.count() == 1


def test_the_local_providers_page_is_gone_when_stripe_is_the_provider(client, mug, settings):
    add_to_cart(client, "MUG")
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    provider_page = client.post(f"/orders/{Order.objects.get().number}/pay/")["Location"]
    settings.PAYMENT_PROVIDER = "stripe"

    assert client.get(provider_page).status_code == 404
    assert client.post(provider_page, {"outcome": "pay"}).status_code == 404
    assert Order.objects.get().status == "awaiting_payment"


def test_a_payment_that_came_after_the_stock_was_gone_shows_as_refunded(client, mug):
    add_to_cart(client, "MUG", 5)
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    order = Order.objects.get()
    client.post(f"/orders/{order.number}/pay/")  # at the provider's page...
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    order_expire(order=order)  # ...while the reservation runs out
    order_place(email="bob@example.com", items=[{"sku": "MUG", "quantity": 5}], idempotency_key="bob")

    webhook_deliver(local_event("checkout.session.completed", payment=Payment.objects.get()))

    page = client.get(f"/orders/{order.number}/").content.decode()
    assert "Expired" in page and "Your payment of €62.50 arrived when this order could no longer be paid" in page
    assert Payment.objects.get().state == "refunded"


def test_orders_are_private(client, mug, customer):
    add_to_cart(client, "MUG")
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    number = Order.objects.get().number
    stranger = client.__class__()
    stranger.force_login(customer)
    for response in (
        stranger.get(f"/orders/{number}/"),
        stranger.post(f"/orders/{number}/pay/"),
        stranger.post(f"/orders/{number}/cancel/"),
        client.__class__().get(f"/orders/{number}/"),
    ):
        assert response.status_code == 404
    assert Order.objects.get().status == "awaiting_payment"


def test_a_logged_in_customer_checks_out_and_sees_my_orders(client, mug, customer):
    assert client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"}).status_code == 302
    add_to_cart(client, "MUG")
    checkout = client.get("/checkout/").content.decode()
    assert 'name="email"' in checkout  # alice's account has no email: her order's emails need one
    asked = client.post("/checkout/", {"idempotency_key": checkout_key(client)}).content.decode()
    assert "Give an email address: your order&#x27;s emails go there." in asked and not Order.objects.exists()
    client.post("/checkout/", {"email": "alice@example.com", "idempotency_key": checkout_key(client)})
    order = Order.objects.get()
    assert order.customer == customer and order.email == "alice@example.com"
    customer.email = "alice@example.com"
    customer.save()
    add_to_cart(client, "MUG")
    assert "Ordering as <strong>alice</strong> (alice@example.com)" in client.get("/checkout/").content.decode()
    assert order.number in client.get("/orders/").content.decode()
    client.post("/accounts/logout/")
    assert client.get(f"/orders/{order.number}/").status_code == 404


def test_guest_orders_stay_visible_after_logging_in(client, mug, customer):
    add_to_cart(client, "MUG")
    client.post("/checkout/", {"email": "ann@example.com", "idempotency_key": checkout_key(client)})
    number = Order.objects.get().number
    client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"})
    assert client.get(f"/orders/{number}/").status_code == 200
    assert number in client.get("/orders/").content.decode()


def test_csrf_is_enforced(mug):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/cart/add/MUG/", {"quantity": 1}).status_code == 403


def test_my_orders_come_a_page_at_a_time_newest_first_with_a_query_count_that_does_not_grow(client, mug, customer):
    def orders_placed(count: int) -> list[str]:
        placed = Order.objects.bulk_create(
            Order(
                number=new_order_number(),
                customer=customer,
                email="alice@example.com",
                idempotency_key=f"k{count}-{n}",
                idempotency_key_hash=f"{count:032d}{n:032d}",
                idempotency_scope=f"user:{customer.pk}",
                request_fingerprint="-",
                expires_at=timezone.now(),
                created_at=timezone.now() - timedelta(minutes=count * 100 - n),
                **UNPRICED_ORDER,
            )
            for n in range(count)
        )
        return [order.number for order in sorted(placed, key=lambda order: order.created_at, reverse=True)]

    client.force_login(customer)
    newest = orders_placed(25)
    with CaptureQueriesContext(connection) as few:
        first = client.get("/orders/").content.decode()
    orders_placed(500)
    with CaptureQueriesContext(connection) as many:
        client.get("/orders/")

    assert [number for number in newest if number in first] == newest[:20]
    assert 'rel="next"' in first and "Page 1 of 2" in first
    assert all(number in client.get("/orders/?page=2").content.decode() for number in newest[20:])
    assert len(many) == len(few)
