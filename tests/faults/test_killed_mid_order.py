"""A web worker placing an order dies mid-transaction, holding the SKUs' locks: its database connection
is killed (``KILL CONNECTION``), or the worker process itself is (SIGKILL).

To catch the worker at that point, the test holds a row lock on the second SKU's stock row: the
worker locks both SKUs in Redis, begins, reserves the first SKU and then waits on the second row.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from inventory.locks import lock_list
from orders.models import Order
from tests.conftest import stock_of
from tests.faults.conftest import assert_books, row_locked, waiting_order_update
from tests.processes import app_server, http, process_env

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = {"items": [{"sku": "A", "quantity": 1}, {"sku": "B", "quantity": 1}]}


def in_background(func):
    """Run ``func`` in a thread; its answer, or the exception it raised, lands in the returned list."""
    answers = []

    def run():
        try:
            answers.append(func())
        except Exception as exc:  # a killed worker drops the connection
            answers.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answers


@pytest.fixture
def skus(make_variant):
    return make_variant(sku="A", stock=5), make_variant(sku="B", stock=5)


def test_a_connection_killed_mid_transaction_rolls_back_releases_the_locks_and_says_so(skus, token, tmp_path):
    a, b = skus
    env = process_env(ORDER_THROTTLE_RATE="100000/minute")
    with app_server(env, tmp_path / "gunicorn.log", workers=2) as (url, _):
        with row_locked(stock_of(b)) as session:
            request, answers = in_background(
                lambda: http("POST", f"{url}/api/orders/", token=token, body=ITEMS, key="k")
            )
            connection_id, _ = waiting_order_update(session)
            assert stock_of(a).reserved == 0  # the worker's UPDATE of A is not committed: it is mid-transaction
            session.cursor().execute(f"KILL CONNECTION {int(connection_id)}")
            request.join(30)
            locks_after = lock_list()
        retried = http("POST", f"{url}/api/orders/", token=token, body=ITEMS, key="k")

    status, body, headers = answers[0]
    assert (status, body["code"]) == (503, "database_unavailable"), body
    assert int(headers["Retry-After"]) > 0 and "KILL" not in str(body) and "Traceback" not in str(body)
    assert locks_after == []  # released at once, not left to expire
    assert retried[0] == 201  # the same key again: nothing was placed the first time
    assert Order.objects.count() == 1
    assert (stock_of(a).reserved, stock_of(b).reserved) == (1, 1)
    assert_books(a, b)


def worker_with_local_port(master_pid: int, port: int) -> int:
    """The gunicorn worker whose TCP socket has this local port (from /proc, no extra tools)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    for pid in map(int, children):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = fd.readlink().name
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return pid
    raise AssertionError(f"no worker of {master_pid} owns local port {port}")


def _place_retrying(url, token, *, key):
    """Place an order, retrying with the same key while the shop answers 503 lock_timeout."""
    while (answer := http("POST", f"{url}/api/orders/", token=token, body=ITEMS, key=key))[1].get(
        "code"
    ) == "lock_timeout":
        time.sleep(0.1)
    return answer


def test_a_worker_killed_holding_the_locks_blocks_nobody_past_the_lock_ttl(skus, token, tmp_path):
    a, b = skus
    ttl = 3
    # Buyers give up before a dead holder's lock expires (check inventory.E002), so they retry, as a
    # client told 503 lock_timeout with Retry-After does.
    env = process_env(ORDER_THROTTLE_RATE="100000/minute", LOCK_TTL_SECONDS=ttl, LOCK_WAIT_SECONDS=ttl / 2)
    with app_server(env, tmp_path / "gunicorn.log", workers=3) as (url, master):
        with row_locked(stock_of(b)) as session:
            request, answers = in_background(
                lambda: http("POST", f"{url}/api/orders/", token=token, body=ITEMS, key="killed")
            )
            _, port = waiting_order_update(session)
            worker = worker_with_local_port(master.pid, port)
            assert {lock["sku"] for lock in lock_list()} == {"A", "B"}  # the worker holds both locks
            os.kill(worker, signal.SIGKILL)
            killed_at = time.monotonic()
        request.join(30)
        others = [in_background(lambda n=n: _place_retrying(url, token, key=f"o{n}")) for n in range(3)]
        for thread, _ in others:
            thread.join(30)
        served_within = time.monotonic() - killed_at
        retried = http("POST", f"{url}/api/orders/", token=token, body=ITEMS, key="killed")

    assert isinstance(answers[0], ConnectionError), answers  # its client saw the connection drop
    assert [answer[0][0] for _, answer in others] == [201, 201, 201]
    assert served_within < ttl + 2  # the dead worker's locks expired with their TTL; nobody waited longer
    assert retried[0] == 201
    assert Order.objects.count() == 4
    assert (stock_of(a).reserved, stock_of(b).reserved) == (4, 4)
    assert_books(a, b)
