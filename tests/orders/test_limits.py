"""Flash-sale fairness: a limit per customer per product, a sale start time, a cap on a guest's unpaid orders."""

import time
from datetime import timedelta

import pytest
from django.test import Client

from core.clock import db_now
from core.errors import DomainError
from orders import services
from orders.models import Order
from shop.models import ProductVariant
from tests.conftest import assert_books_balance, pay, stock_of
from tests.orders.test_batching import _queue_behind_held_lock
from tests.orders.test_pages import add_to_cart, checkout_key
from tests.race import run_parallel


@pytest.fixture
def limited(make_variant):
    variant = make_variant(sku="LTD", name="Limited sneaker", stock=100, price="99.00")
    ProductVariant.objects.filter(pk=variant.pk).update(max_per_customer=2)
    return variant


def place(quantity=1, *, key, customer=None, email="", **extra):
    return services.order_place(
        customer=customer, email=email, items=[{"sku": "LTD", "quantity": quantity}], idempotency_key=key, **extra
    )


def refusal(call) -> dict:
    with pytest.raises(DomainError) as caught:
        call()
    return caught.value.as_dict()


@pytest.mark.django_db
def test_a_customer_holds_at_most_the_limit_across_unpaid_and_paid_orders(limited, customer):
    first = place(key="a", customer=customer)
    pay(first)
    assert refusal(lambda: place(2, key="b", customer=customer)) == {
        "code": "limit_exceeded",
        "detail": "This order would take more units of a product than one customer may hold.",
        "sku": "LTD",
        "limit": 2,
        "held": 1,
        "allowed": 1,
    }
    second = place(key="c", customer=customer)
    assert refusal(lambda: place(key="d", customer=customer))["allowed"] == 0
    services.order_cancel(order=second)  # a cancelled order holds nothing
    place(key="e", customer=customer)
    assert (stock_of(limited).on_hand, stock_of(limited).reserved) == (99, 1) and Order.objects.count() == 3
    assert_books_balance(limited)


@pytest.mark.django_db
def test_a_guest_is_one_customer_however_the_email_is_spelt(limited):
    place(2, key="a", email="Buyer+x@Example.com ")
    assert refusal(lambda: place(key="b", email="buyer@example.com"))["code"] == "limit_exceeded"
    assert refusal(lambda: place(key="c", email="BUYER+other@example.COM"))["code"] == "limit_exceeded"
    place(key="d", email="someone@example.com")


def _one_unit(key: str) -> str:
    from django.contrib.auth import get_user_model

    try:
        return place(key=key, customer=get_user_model().objects.get(username="alice")).number
    except DomainError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_orders_from_one_customer_from_several_processes_place_exactly_the_limit(limited, customer):
    answers = run_parallel(_one_unit, [{"key": f"k{n}"} for n in range(20)], processes=4, barrier=False)

    assert sorted(answers).count("limit_exceeded") == 18
    assert Order.objects.filter(customer=customer).count() == 2
    assert stock_of(limited).reserved == 2
    assert_books_balance(limited)


@pytest.mark.django_db(transaction=True)
def test_one_guests_orders_in_one_group_commit_batch_cannot_beat_the_limit(make_variant, tmp_path):
    hot = make_variant(sku="HOT", stock=100)
    ProductVariant.objects.filter(pk=hot.pk).update(max_per_customer=2)
    jobs = [{"key": f"k{n}", "quantity": 1} for n in range(6)]  # all from b@example.com

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=6)

    assert batch_sizes == [6]
    assert [r for r in results if isinstance(r, dict)] == [
        {
            "code": "limit_exceeded",
            "detail": "This order would take more units of a product than one customer may hold.",
            "sku": "HOT",
            "limit": 2,
            "held": 2,
            "allowed": 0,
        }
    ] * 4
    assert stock_of(hot).reserved == 2


@pytest.mark.django_db
def test_paying_an_expired_order_cannot_take_the_buyer_past_the_limit(limited, customer):
    old = place(2, key="a", customer=customer)
    Order.objects.filter(pk=old.pk).update(expires_at=db_now() - timedelta(seconds=1))
    assert services.order_expire(order=Order.objects.get(pk=old.pk))
    place(2, key="b", customer=customer)
    assert refusal(lambda: pay(Order.objects.get(pk=old.pk)))["code"] == "limit_exceeded"
    assert stock_of(limited).reserved == 2
    assert_books_balance(limited)


@pytest.mark.django_db
def test_a_guest_keeps_at_most_the_allowed_unpaid_orders_per_address(limited, settings):
    settings.GUEST_MAX_OPEN_ORDERS_PER_CLIENT = 2
    ProductVariant.objects.filter(pk=limited.pk).update(max_per_customer=None)
    place(key="a", email="a@example.com", client_address="10.7.0.1")
    place(key="b", email="b@example.com", client_address="10.7.0.1")
    over = refusal(lambda: place(key="c", email="c@example.com", client_address="10.7.0.1"))
    assert (over["code"], over["limit"]) == ("too_many_open_orders", 2)
    assert place(key="b", email="b@example.com", client_address="10.7.0.1").idempotency_key == "b"  # a replay
    place(key="c", email="c@example.com", client_address="10.7.0.2")
    pay(Order.objects.get(idempotency_key="a"))  # a paid order is not open
    place(key="d", email="d@example.com", client_address="10.7.0.1")


@pytest.mark.django_db
def test_a_guests_browser_keeps_at_most_the_allowed_unpaid_orders(limited, settings):
    settings.GUEST_MAX_OPEN_ORDERS_PER_CLIENT = 2
    ProductVariant.objects.filter(pk=limited.pk).update(max_per_customer=None)
    browser = Client()
    for n in range(2):
        add_to_cart(browser, "LTD")
        page = browser.post("/checkout/", {"email": f"g{n}@example.com", "idempotency_key": checkout_key(browser)})
        assert page.status_code == 302
    add_to_cart(browser, "LTD")
    Order.objects.update(client_address="")  # the cap holds per browser even from a new address
    page = browser.post("/checkout/", {"email": "g9@example.com", "idempotency_key": checkout_key(browser)})
    assert "too many unpaid orders" in page.content.decode()
    assert Order.objects.count() == 2


@pytest.mark.django_db
def test_a_sale_that_has_not_started_refuses_through_the_api_and_the_checkout_then_opens(
    limited, customer_client, client
):
    add_to_cart(client, "LTD")  # while on sale; then the sale is moved to start later
    starts_at = db_now() + timedelta(seconds=2)
    ProductVariant.objects.filter(pk=limited.pk).update(sale_starts_at=starts_at, max_per_customer=None)
    assert add_to_cart(client, "LTD")["Location"] == "/products/LTD/"  # no adding before the sale
    response = customer_client.post(
        "/api/orders/", {"items": [{"sku": "LTD", "quantity": 1}]}, format="json", HTTP_IDEMPOTENCY_KEY="early"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "sale_not_started" and response.json()["starts_at"] == starts_at.isoformat()
    page = client.post("/checkout/", {"email": "g@example.com", "idempotency_key": checkout_key(client)}, follow=True)
    assert "opens at" in page.content.decode() and Order.objects.count() == 0

    time.sleep(max(0.0, (starts_at - db_now()).total_seconds()) + 0.1)
    response = customer_client.post(
        "/api/orders/", {"items": [{"sku": "LTD", "quantity": 1}]}, format="json", HTTP_IDEMPOTENCY_KEY="on-time"
    )
    assert response.status_code == 201
    placed = client.post("/checkout/", {"email": "g@example.com", "idempotency_key": checkout_key(client)})
    assert placed.status_code == 302 and Order.objects.count() == 2
