"""Redis fails under the shop. While it is away orders get a clear 503 and nothing is reserved; the
shop recovers by itself when it is back. A Redis crash mid-load (every lock gone at once) cannot
oversell, because the database's guarded UPDATE decides, not the lock."""

import os
import threading
import time

import pytest

import inventory.services
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from orders.models import Order
from orders.services import order_place
from tests.conftest import stock_of
from tests.faults.conftest import assert_books
from tests.processes import RedisServer, app_server, http, process_env
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


def test_orders_get_a_503_while_redis_is_down_and_go_through_again_once_it_is_back(make_product, token, tmp_path):
    mug = make_product(sku="MUG", stock=50)
    with RedisServer(tmp_path) as redis:
        env = process_env(REDIS_URL=redis.url, CELERY_BROKER_URL=redis.url, ORDER_THROTTLE_RATE="100000/minute")
        with app_server(env, tmp_path / "gunicorn.log", workers=2) as (url, _):

            def order(key):
                body = {"items": [{"sku": "MUG", "quantity": 1}]}
                return http("POST", f"{url}/api/orders/", token=token, body=body, key=key)

            assert order("before")[0] == 201
            redis.kill()
            during = [order(f"during-{n}") for n in range(6)]
            reserved_during, orders_during = stock_of(mug).reserved, Order.objects.count()
            redis.start()  # the same address; the shop is not restarted
            after = order("after")
            retried = [order(f"during-{n}") for n in range(6)]  # the buyers' retries, same keys

    for status, body, headers in during:
        assert (status, body["code"]) == (503, "lock_unavailable"), body
        assert int(headers["Retry-After"]) > 0
        assert "Traceback" not in str(body)
    assert reserved_during == 1 == orders_during  # nothing was reserved while Redis was down
    assert after[0] == 201
    assert [status for status, _, _ in retried] == [201] * 6
    assert stock_of(mug).reserved == 8 == Order.objects.count()
    assert_books(mug)


def _slow_writes(seconds):
    """Hold every stock section a little longer before its guarded UPDATE: a wider window for lost locks."""
    write = inventory.services._stock_reserve_guarded_all

    def write_slowly(product_id, quantity):
        time.sleep(seconds)
        return write(product_id, quantity)

    inventory.services._stock_reserve_guarded_all = write_slowly


def _buyer(deadline):
    """Buy one unit at a time until sold out; retry a busy or unreachable lock with the same key."""
    _slow_writes(0.05)
    wait_for_peers()
    placed, retries, key = [], [], None
    while time.monotonic() < deadline:
        key = key or f"{os.getpid()}-{len(placed)}"
        try:
            order = order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key=key)
        except (LockUnavailable, LockTimeout) as exc:
            retries.append(exc.code)
            time.sleep(0.02)
            continue
        except InsufficientStock:
            return placed, 1, retries
        placed.append(order.number)
        key = None
    return placed, 0, retries


def test_a_redis_crash_just_before_sell_out_cannot_oversell(make_product, private_redis_settings):
    """Redis is killed and restarted twice mid-load, the second time with only a few units left:
    buyers already in a section keep going while newcomers lock afresh on the empty Redis."""
    redis, stock = private_redis_settings, 60
    mug = make_product(sku="MUG", stock=stock)
    deadline = time.monotonic() + 60
    results = []
    buyers = threading.Thread(
        target=lambda: results.extend(run_parallel(_buyer, [{"deadline": deadline}] * 8, processes=8, barrier=True))
    )
    buyers.start()
    crashes = []
    for threshold in (stock // 2, 8):
        while buyers.is_alive() and stock_of(mug).available > threshold:
            time.sleep(0.01)
        crashes.append(stock_of(mug).available)
        redis.kill()
        redis.start()
    buyers.join()

    placed = [number for numbers, _, _ in results for number in numbers]
    retries = [code for _, _, codes in results for code in codes]
    assert all(0 < available <= stock // 2 for available in crashes), crashes  # both crashes hit mid-load
    assert "lock_unavailable" in retries  # buyers did see the lock service fail
    assert len(placed) == len(set(placed)) == Order.objects.count() == stock_of(mug).reserved <= stock
    assert sum(refused for _, refused, _ in results) == 8  # everyone kept buying until sold out
    assert stock_of(mug).available == 0
    assert_books(mug)
