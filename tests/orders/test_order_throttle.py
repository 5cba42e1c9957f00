"""One order budget per customer, guest email and client address, shared by the API and the checkout page."""

import pytest
from django.test import Client

from orders.models import Order
from tests.orders.test_pages import add_to_cart, checkout_key
from tests.race import run_parallel, wait_for_peers

RATE = 3


@pytest.fixture(autouse=True)
def order_rate(settings):
    settings.ORDER_THROTTLE_RATE = f"{RATE}/minute"


@pytest.fixture
def mug(make_variant):
    return make_variant(sku="MUG", name="Logo mug", stock=100, price="12.50")


def api_order(client, key: str):
    return client.post(
        "/api/orders/", {"items": [{"sku": "MUG", "quantity": 1}]}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def web_order(client, email: str = ""):
    """Put a mug in the cart and submit the checkout page; the response to the submit."""
    add_to_cart(client, "MUG")
    return client.post("/checkout/", {"email": email, "idempotency_key": checkout_key(client)})


def assert_throttled_page(response):
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "Too many orders" in response.content.decode()


@pytest.mark.django_db
def test_the_checkout_page_is_throttled_per_guest_email_whatever_its_spelling(mug):
    for n in range(RATE):
        assert web_order(Client(REMOTE_ADDR=f"10.1.0.{n}"), "ann@example.com").status_code == 302
    assert_throttled_page(web_order(Client(REMOTE_ADDR="10.1.0.9"), " Ann+sale@Example.COM "))
    assert Order.objects.count() == RATE
    assert web_order(Client(REMOTE_ADDR="10.1.0.9"), "bob@example.com").status_code == 302


@pytest.mark.django_db
def test_the_checkout_page_is_throttled_per_client_address_whatever_the_email(mug):
    for n in range(RATE):
        assert web_order(Client(REMOTE_ADDR="10.2.0.1"), f"guest{n}@example.com").status_code == 302
    assert_throttled_page(web_order(Client(REMOTE_ADDR="10.2.0.1"), "another@example.com"))
    assert web_order(Client(REMOTE_ADDR="10.2.0.2"), "another@example.com").status_code == 302


@pytest.mark.django_db
def test_the_api_and_the_checkout_page_share_a_customers_budget(mug, customer, customer_client):
    web = Client(REMOTE_ADDR="10.3.0.1")
    web.force_login(customer)
    for n in range(RATE - 1):
        assert api_order(customer_client, f"k{n}").status_code == 201
    assert web_order(web, "alice@example.com").status_code == 302
    throttled = api_order(customer_client, "k9")
    assert throttled.status_code == 429 and throttled.json()["code"] == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= 60
    assert_throttled_page(web_order(web, "alice@example.com"))
    assert Order.objects.count() == RATE
    assert customer_client.get("/api/orders/").status_code == 200  # reading is not throttled


def _orders_at_once(*, via: str, attempts: int) -> list[int]:
    """In a worker process: log in as alice, wait for the other workers, then try ``attempts`` orders."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    alice = get_user_model().objects.get(username="alice")
    client = APIClient(REMOTE_ADDR=f"10.4.0.{attempts}") if via == "api" else Client(REMOTE_ADDR="10.4.1.1")
    client.force_login(alice)
    if via == "web":
        add_to_cart(client, "MUG")  # the checkout page issues its keys only for a cart with something in it
    keys = [checkout_key(client) for _ in range(attempts)] if via == "web" else []
    wait_for_peers()
    if via == "api":
        return [api_order(client, f"api-{attempts}-{n}").status_code for n in range(attempts)]
    statuses = []
    for key in keys:
        add_to_cart(client, "MUG")  # a placed order empties the cart
        statuses.append(client.post("/checkout/", {"email": "alice@example.com", "idempotency_key": key}).status_code)
    return statuses


@pytest.mark.django_db(transaction=True)
def test_parallel_orders_from_several_processes_pass_at_most_the_limit(mug, customer):
    jobs = [{"via": "api", "attempts": 4}, {"via": "api", "attempts": 5}, {"via": "web", "attempts": 4}]
    jobs.append({"via": "web", "attempts": 4})

    answers = run_parallel(_orders_at_once, jobs, processes=4, barrier=True)

    statuses = [status for worker_answers in answers for status in worker_answers]

    placed = Order.objects.filter(customer=customer).count()
    assert placed <= RATE
    assert statuses.count(201) + statuses.count(302) == placed
    assert statuses.count(429) == len(statuses) - placed
