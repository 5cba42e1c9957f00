"""The real app server (gunicorn, several workers) on MariaDB + Redis, hit from several processes."""

import urllib.parse
from http.client import HTTPConnection

import pytest

from inventory.models import StockMovement
from orders.models import Order, OrderLine
from tests.conftest import assert_books_balance, assert_told_their_orders, stock_of, token_for
from tests.processes import app_server, http, process_env
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(tmp_path):
    """gunicorn with 4 workers on the test database; yields its base URL."""
    env = process_env(ORDER_THROTTLE_RATE="100000/minute", LOG_LEVEL="WARNING")
    with app_server(env, tmp_path / "gunicorn.log", workers=4) as (url, _):
        yield url


def order_of(quantity: int) -> dict:
    return {"items": [{"sku": "MUG", "quantity": quantity}]}


def _buyer(url, token, orders):
    """One client process placing its orders one after another; returns (key, quantity, status, body) each."""
    wait_for_peers()
    answers = []
    for key, quantity in orders:
        status, body, _ = http("POST", f"{url}/api/orders/", token=token, body=order_of(quantity), key=key)
        answers.append((key, quantity, status, body))
    return answers


def tokens(django_user_model, count):
    users = [django_user_model.objects.create_user(username=f"buyer{i}", password="pw-12345678") for i in range(count)]
    return [token_for(user) for user in users]


def test_300_concurrent_api_orders_on_one_sku_never_oversell(server, make_variant, django_user_model):
    """Every buyer gets a definite answer, and each 201's number is the order stored under its key.

    No 503 is allowed: gunicorn's 4 sync workers run at most 4 orders at once, so a buyer waits for the
    SKU behind at most 3 others' batches, far less than the lock wait (``LOCK_WAIT_SECONDS``).
    """
    mug = make_variant(sku="MUG", stock=100)
    buyers = tokens(django_user_model, 12)
    jobs = [
        {"url": server, "token": token, "orders": [(f"b{b}-{n}", 1 + (b + n) % 3) for n in range(25)]}
        for b, token in enumerate(buyers)
    ]

    answers = [answer for batch in run_parallel(_buyer, jobs, processes=12, barrier=True) for answer in batch]

    assert len(answers) == 300
    undecided = [
        (key, status, body)
        for key, _, status, body in answers
        if status != 201 and (status, body.get("code")) != (409, "insufficient_stock")
    ]
    assert undecided == []  # no 503: every order was placed or definitely refused
    placed = {key: quantity for key, quantity, status, _ in answers if status == 201}
    refused = [quantity for _, quantity, status, _ in answers if status == 409]
    told = {key: {"number": body["number"]} for key, _, status, body in answers if status == 201}
    assert_told_their_orders(told, list(placed))
    assert dict(OrderLine.objects.values_list("order__idempotency_key", "quantity")) == placed
    stock = stock_of(mug)
    assert stock.reserved == sum(placed.values()) <= 100
    assert refused and stock.available < min(refused)  # nobody was refused while their units were there
    assert_books_balance(mug)


def _replay(url, token):
    wait_for_peers()
    return http(
        "POST", f"{url}/api/orders/", token=token, body={"items": [{"sku": "MUG", "quantity": 2}]}, key="the-same-key"
    )[:2]


def test_a_post_replayed_20_times_at_once_creates_one_order(server, make_variant, django_user_model):
    mug = make_variant(sku="MUG", stock=10)
    (token,) = tokens(django_user_model, 1)

    answers = run_parallel(_replay, [{"url": server, "token": token}] * 20, processes=20, barrier=True)

    assert {status for status, _ in answers} == {201}
    assert len({body["number"] for _, body in answers}) == 1
    assert Order.objects.count() == 1 and stock_of(mug).reserved == 2
    assert StockMovement.objects.filter(kind="reserve").count() == 1
    assert_books_balance(mug)


def _get(url: str, path: str, headers: dict) -> tuple[int, dict, str]:
    """One GET that does not follow redirects: (status, headers, body)."""
    connection = HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def test_gunicorn_serves_the_shop_with_the_production_settings_behind_a_tls_proxy(tmp_path, make_variant):
    make_variant(sku="MUG", stock=3, name="Blue mug")
    proxied = {"X-Forwarded-Proto": "https", "Host": "shop.example.com"}
    env = process_env(
        DJANGO_SETTINGS_MODULE="config.settings_production",
        ALLOWED_HOSTS="shop.example.com",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        PAYMENT_PROVIDER="stripe",  # production refuses the local one
        STRIPE_SECRET_KEY="sk_test_not_a_real_key",
        STRIPE_WEBHOOK_SECRET="whsec_not_a_real_secret",
        LOG_LEVEL="WARNING",
    )
    with app_server(env, tmp_path / "gunicorn.log", workers=2, headers=proxied) as (url, _):
        status, headers, body = _get(url, "/", proxied)
        assert status == 200 and "Blue mug" in body
        assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"

        status, headers, _ = _get(url, "/", {"Host": "shop.example.com"})  # plain HTTP: to HTTPS
        assert (status, headers["Location"]) == (301, "https://shop.example.com/")

        status, _, _ = _get(url, "/", {"X-Forwarded-Proto": "https", "Host": "attacker.example"})
        assert status == 400  # a host the shop does not serve
