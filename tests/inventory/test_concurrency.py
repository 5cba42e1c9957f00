"""Oversell tests with real processes on real MariaDB + Redis. They count units; any oversell fails."""

import logging
import random
import time

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection, transaction
from django.test import override_settings
from prometheus_client import REGISTRY

import inventory.sql
from core.errors import DomainError
from inventory.errors import InsufficientStock
from inventory.locks import held_skus, sku_locks
from inventory.locks.wire import lock_key
from inventory.models import Stock
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, pay, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


def _place(items, key):
    """One buyer: returns what happened, never raises (the parent counts outcomes)."""
    try:
        order = order_place(email=f"{key}@example.com", items=items, idempotency_key=key)
        return {"outcome": "placed", "number": order.number}
    except InsufficientStock as exc:
        return {"outcome": "insufficient_stock", "shortages": exc.payload["shortages"]}
    except DomainError as exc:
        return {"outcome": exc.code}
    except Exception as exc:  # a deadlock or any crash must show up in the counts, not kill the pool
        return {"outcome": f"{type(exc).__name__}: {exc}"}


def test_500_buyers_from_16_processes_never_oversell_one_sku(make_variant):
    mug = make_variant(sku="MUG", stock=100)
    rng = random.Random(2)
    jobs = [{"items": [{"sku": "MUG", "quantity": rng.randint(1, 3)}], "key": f"buyer-{i}"} for i in range(500)]

    results = run_parallel(_place, jobs, processes=16)

    outcomes = [r["outcome"] for r in results]
    assert set(outcomes) <= {"placed", "insufficient_stock"}, set(outcomes)
    sold = sum(job["items"][0]["quantity"] for job, r in zip(jobs, results, strict=True) if r["outcome"] == "placed")
    refused = [job["items"][0]["quantity"] for job, r in zip(jobs, results, strict=True) if r["outcome"] != "placed"]
    stock = stock_of(mug)
    assert stock.reserved == sold <= 100
    assert Order.objects.count() == outcomes.count("placed")
    # Nobody was refused while their units were there: each refusal saw fewer than it asked for...
    for r in results:
        for shortage in r.get("shortages", []):
            assert shortage["available"] < shortage["requested"]
    # ...and what is left cannot serve even the smallest refused order.
    assert refused and stock.available < min(refused)
    assert_books_balance(mug)


def test_orders_over_three_skus_in_random_order_neither_deadlock_nor_time_out(make_variant):
    variants = [make_variant(sku=f"SKU-{n}", stock=250) for n in range(5)]
    rng = random.Random(3)
    jobs = []
    for i in range(500):
        picked = rng.sample([p.sku for p in variants], 3)  # random order on purpose
        jobs.append({"items": [{"sku": sku, "quantity": rng.randint(1, 3)} for sku in picked], "key": f"multi-{i}"})

    results = run_parallel(_place, jobs, processes=16)

    outcomes = [r["outcome"] for r in results]
    assert set(outcomes) <= {"placed", "insufficient_stock"}, set(outcomes)  # no lock_timeout, no deadlock
    assert outcomes.count("insufficient_stock") > 0  # the load did exhaust stock
    for variant in variants:
        wanted = sum(
            line["quantity"]
            for job, r in zip(jobs, results, strict=True)
            if r["outcome"] == "placed"
            for line in job["items"]
            if line["sku"] == variant.sku
        )
        stock = stock_of(variant)
        assert stock.reserved == wanted <= 250
        # Refusals were real: each short line saw less than it asked for, and what is left of a SKU
        # cannot serve the smallest line refused for it.
        refused_here = [
            shortage["requested"]
            for r in results
            for shortage in r.get("shortages", [])
            if shortage["sku"] == variant.sku
        ]
        assert all(s["available"] < s["requested"] for r in results for s in r.get("shortages", []))
        if refused_here:
            assert stock.available < min(refused_here)
    assert_books_balance(*variants)


def test_the_lock_is_still_held_when_the_transaction_commits(make_variant, monkeypatch):
    """The heart of the design: commit first, then release (seed 000's sell3 does the reverse)."""
    make_variant(sku="MUG", stock=10)
    lock_client = caches[settings.LOCK_CACHE_ALIAS].client
    lock_key_in_redis = lock_client.make_key(lock_key("MUG"))
    real_commit = connection.commit
    seen = []

    def commit():
        seen.append((held_skus(), lock_client.get_client().exists(lock_key_in_redis)))
        real_commit()

    monkeypatch.setattr(connection, "commit", commit)
    order = order_place(email="a@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")
    pay(order)

    # Placing, and starting the payment (its section may revive an expired order), commit under the lock;
    # the payment's record and the webhook's event change no stock; the webhook's apply commits under it.
    assert seen == [({"MUG"}, 1), ({"MUG"}, 1), (frozenset(), 0), (frozenset(), 0), ({"MUG"}, 1)]


def _reserve_with_a_stall(stall_seconds):
    """Take the lock with the stock there, then stall past the lock's TTL before the guarded UPDATE."""
    write = inventory.sql.reserved_add_if_free

    def slow_write(**kwargs):
        wait_for_peers()  # the rival starts now, while we hold a lock that is about to expire
        time.sleep(stall_seconds)
        return write(**kwargs)

    inventory.sql.reserved_add_if_free = slow_write
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("inventory.locks").addHandler(handler)
    overruns = REGISTRY.get_sample_value("shop_lock_overruns_total")  # this process's /metrics
    with override_settings(LOCK_TTL_SECONDS=0.5):
        result = _place([{"sku": "MUG", "quantity": 5}], "stalled")
    result["log"] = [r.getMessage() for r in records]
    result["overruns"] = REGISTRY.get_sample_value("shop_lock_overruns_total") - overruns
    return result


def _reserve_after_peer():
    wait_for_peers()
    time.sleep(0.7)  # past the stalled holder's TTL
    return _place([{"sku": "MUG", "quantity": 5}], "rival")


def _run(func, **kwargs):
    return func(**kwargs)


def test_a_holder_whose_lock_expires_mid_section_still_cannot_oversell(make_variant):
    mug = make_variant(sku="MUG", stock=5)

    stalled, rival = run_parallel(
        _run,
        [{"func": _reserve_with_a_stall, "stall_seconds": 1.5}, {"func": _reserve_after_peer}],
        processes=2,
        barrier=True,
    )

    assert rival["outcome"] == "placed"  # it got the expired lock and the stock
    assert stalled["outcome"] == "insufficient_stock"  # the SQL guard refused the stale holder
    assert any("lock overrun" in line for line in stalled["log"])
    assert stalled["overruns"] == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 5)
    assert_books_balance(mug)


# --- Seed 000's sell3, reproduced beside the service ------------------------------------------

SEED_TABLE = "seed_sell3_inventory"


def _sell3_buy(quantity, pause):
    """sell3's structure: the Redis lock is taken and released *inside* the open transaction."""
    wait_for_peers()
    with transaction.atomic():
        with sku_locks(["SEED-GOODS"]):
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT stocks FROM {SEED_TABLE} WHERE goods_id = 1")
                (stocks,) = cursor.fetchone()
                if stocks < quantity:
                    return False
                cursor.execute(f"UPDATE {SEED_TABLE} SET stocks = stocks - %s WHERE goods_id = 1", [quantity])
        time.sleep(pause)  # lock released, commit not yet done: the window sell3 leaves open
    return True


def _service_buy(key, quantity, pause, pauses):
    """The service, given the same pause at the same point: after its stock decision (the guarded
    UPDATE), before its commit. Each pause is recorded as a line in ``pauses``."""
    reserve = inventory.sql.reserved_add_if_free

    def reserve_then_pause(**kwargs):
        reserved = reserve(**kwargs)
        with open(pauses, "a") as out:
            out.write(f"{key}\n")
        time.sleep(pause)  # still inside the lock: rivals wait instead of reading stale rows
        return reserved

    inventory.sql.reserved_add_if_free = reserve_then_pause
    wait_for_peers()
    return _place([{"sku": "MUG", "quantity": quantity}], key)["outcome"] == "placed"


@pytest.fixture
def seed_table(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {SEED_TABLE} (goods_id INT PRIMARY KEY, stocks INT NOT NULL) ENGINE=InnoDB")
        cursor.execute(f"INSERT INTO {SEED_TABLE} VALUES (1, 3)")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {SEED_TABLE}")


def test_seed_sell3_oversells_on_mariadb_while_the_service_does_not(seed_table, make_variant, tmp_path):
    buyers, stock, pause = 6, 3, 0.3
    pauses = tmp_path / "pauses"

    seed_sales = run_parallel(_sell3_buy, [{"quantity": 1, "pause": pause}] * buyers, processes=buyers, barrier=True)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT stocks FROM {SEED_TABLE} WHERE goods_id = 1")
        (seed_left,) = cursor.fetchone()

    mug = make_variant(sku="MUG", stock=stock)
    service_sales = run_parallel(
        _service_buy,
        [{"key": f"b{i}", "quantity": 1, "pause": pause, "pauses": str(pauses)} for i in range(buyers)],
        processes=buyers,
        barrier=True,
    )

    assert sum(seed_sales) > stock and seed_left < 0, "sell3 should have oversold"
    assert sum(service_sales) == stock
    assert pauses.read_text().split(), "the pause never hit the service between its decision and its commit"
    assert stock_of(mug).available == 0 and Stock.objects.get(variant=mug).reserved == stock
    assert_books_balance(mug)
