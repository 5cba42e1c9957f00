"""The real app server (gunicorn, several workers) on MariaDB + Redis, hit from several processes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from inventory.models import StockMovement
from orders.models import Order
from tests.conftest import assert_books_balance, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """gunicorn with 4 workers on the test database; yields its base URL."""
    db = settings.DATABASES["default"]
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "SECRET_KEY": settings.SECRET_KEY,
        "DATABASE_URL": f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "LOCK_KEY_PREFIX": os.environ.get("LOCK_KEY_PREFIX", "test"),
        "ORDER_THROTTLE_RATE": "100000/minute",
        "LOG_LEVEL": "WARNING",
    }
    log = open(tmp_path / "gunicorn.log", "w")
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    proc = subprocess.Popen(
        [gunicorn, "config.wsgi", "--workers", "4", "--bind", f"127.0.0.1:{port}", "--timeout", "60"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/products/", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
            time.sleep(0.2)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)
    log.close()


def post(url: str, token: str, body: dict, key: str) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


def _buyer(url, token, orders):
    """One client process placing its orders one after another; returns (quantity, status, headers) each."""
    wait_for_peers()
    answers = []
    for key, quantity in orders:
        status, _, headers = post(f"{url}/api/orders/", token, {"items": [{"sku": "MUG", "quantity": quantity}]}, key)
        answers.append((quantity, status, headers))
    return answers


def tokens(django_user_model, count):
    from rest_framework.authtoken.models import Token

    users = [django_user_model.objects.create_user(username=f"buyer{i}", password="pw-12345678") for i in range(count)]
    return [Token.objects.create(user=user).key for user in users]


def test_300_concurrent_api_orders_on_one_sku_never_oversell(server, make_product, django_user_model):
    mug = make_product(sku="MUG", stock=100)
    buyers = tokens(django_user_model, 12)
    jobs = [
        {"url": server, "token": token, "orders": [(f"b{b}-{n}", 1 + (b + n) % 3) for n in range(25)]}
        for b, token in enumerate(buyers)
    ]

    answers = [answer for batch in run_parallel(_buyer, jobs, processes=12, barrier=True) for answer in batch]

    assert len(answers) == 300
    statuses = {status for _, status, _ in answers}
    assert statuses <= {201, 409, 503}, statuses
    assert all(int(headers["Retry-After"]) > 0 for _, status, headers in answers if status == 503)
    placed = sum(quantity for quantity, status, _ in answers if status == 201)
    refused = [quantity for quantity, status, _ in answers if status == 409]
    stock = stock_of(mug)
    assert stock.reserved == placed <= 100
    assert Order.objects.count() == sum(1 for _, status, _ in answers if status == 201)
    assert refused and stock.available < min(refused)  # nobody was refused while their units were there
    assert_books_balance(mug)


def _replay(url, token):
    wait_for_peers()
    return post(f"{url}/api/orders/", token, {"items": [{"sku": "MUG", "quantity": 2}]}, "the-same-key")[:2]


def test_a_post_replayed_20_times_at_once_creates_one_order(server, make_product, django_user_model):
    mug = make_product(sku="MUG", stock=10)
    (token,) = tokens(django_user_model, 1)

    answers = run_parallel(_replay, [{"url": server, "token": token}] * 20, processes=20, barrier=True)

    assert {status for status, _ in answers} == {201}
    assert len({body["number"] for _, body in answers}) == 1
    assert Order.objects.count() == 1 and stock_of(mug).reserved == 2
    assert StockMovement.objects.filter(kind="reserve").count() == 1
    assert_books_balance(mug)
