"""What a lock holder reads back from Redis is data, never code, and whatever goes wrong in its batch,
every buyer it took is answered.

A crafted pickle stands for what anyone who can write to Redis could plant: if the shop unpickled it,
it would create a marker file.
"""

import logging
import os
import pickle

import pytest
from django.conf import settings
from django.core.cache import caches

from core.errors import DomainError
from inventory.locks.queue import QueuedLock
from inventory.locks.wire import lock_key, request_tag
from orders import services
from tests.conftest import assert_books_balance, assert_told_their_orders, stock_of
from tests.race import answers_of, queue_one_by_one

pytestmark = pytest.mark.django_db(transaction=True)


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _buy(key, out, log):
    """Place one order on HOT; what the shop logs at warning and above goes to ``log``."""
    handler = logging.FileHandler(log)
    handler.setLevel(logging.WARNING)
    logging.getLogger("inventory").addHandler(handler)
    try:
        order = services.order_place(email="b@example.com", items=[{"sku": "HOT", "quantity": 1}], idempotency_key=key)
        out.put((key, {"number": order.number}))
    except DomainError as exc:
        out.put((key, exc.as_dict()))
    except Exception as exc:
        out.put((key, {"code": "crashed", "detail": repr(exc)}))


def _redis():
    return caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)


def _plant_request(body: bytes, token: str = "planted"):
    """Queue a request on HOT as a waiter would, with ``body`` as the request."""
    redis = _redis()
    lock = caches[settings.LOCK_CACHE_ALIAS].client.make_key(lock_key("HOT"))
    seconds, micros = redis.time()
    deadline_ms = seconds * 1000 + micros // 1000 + 30_000
    redis.rpush(f"{lock}:queue", f"{deadline_ms}:{token}")
    redis.set(f"{lock}:req:{token}", request_tag("place") + body, px=30_000)


def test_a_planted_pickle_in_the_queue_runs_nothing_and_the_batch_still_serves_everyone(make_variant, tmp_path, caplog):
    hot = make_variant(sku="HOT", stock=10)
    marker = tmp_path / "ran"

    log = tmp_path / "log"
    buyers, out = queue_one_by_one(
        _buy,
        [{"key": "A", "log": log}, lambda: _plant_request(pickle.dumps(_Planted(marker))), {"key": "B", "log": log}],
    )
    answers = answers_of(buyers, out, 2)

    assert not marker.exists()
    assert_told_their_orders(answers, ["A", "B"])
    assert "handed back 1 place request(s) queued on HOT" in log.read_text()
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


def test_a_planted_answer_runs_nothing_and_the_buyer_still_learns_its_order(make_variant, tmp_path, monkeypatch):
    hot = make_variant(sku="HOT", stock=10)
    marker = tmp_path / "ran"
    send = QueuedLock.answer

    def answer_with_a_planted_pickle(lock, answers):
        send(lock, {waiter: pickle.dumps(_Planted(marker)) for waiter in answers})

    monkeypatch.setattr(QueuedLock, "answer", answer_with_a_planted_pickle)  # inherited by the forked buyers

    log = tmp_path / "log"
    buyers, out = queue_one_by_one(_buy, [{"key": "A", "log": log}, {"key": "B", "log": log}])
    answers = answers_of(buyers, out, 2)

    assert not marker.exists()
    assert "refused a malformed answer" in log.read_text()
    assert_told_their_orders(answers, ["A", "B"])  # B looked its key up
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


def test_a_request_that_is_not_even_valid_data_leaves_no_taken_buyer_unanswered(make_variant, tmp_path):
    hot = make_variant(sku="HOT", stock=10)

    log = tmp_path / "log"
    buyers, out = queue_one_by_one(
        _buy, [{"key": "A", "log": log}, lambda: _plant_request(b"\x80\x05garbage"), {"key": "B", "log": log}]
    )
    answers = answers_of(buyers, out, 2)

    assert_told_their_orders(answers, ["A", "B"])
    assert "handed back 1 place request(s) queued on HOT" in log.read_text()
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


@pytest.mark.parametrize("alias", ["default", settings.LOCK_CACHE_ALIAS])
def test_a_pickle_planted_among_the_cached_values_is_refused_and_runs_nothing(alias, tmp_path):
    cache, marker = caches[alias], tmp_path / "ran"
    cache.client.get_client(write=True).set(cache.make_key("throttle_planted"), pickle.dumps(_Planted(marker)))

    with pytest.raises(ValueError):
        cache.get("throttle_planted")

    assert not marker.exists()
    cache.set("throttle_planted", [1.5, 2.5])  # JSON values still round-trip
    assert cache.get("throttle_planted") == [1.5, 2.5]
