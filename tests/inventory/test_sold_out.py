"""Sold-out marks: after a sell-out, refusals are answered from Redis; anything that frees units clears the mark."""

import gc
import os
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.redis_wire import redis_round_trips
from core.errors import DomainError
from inventory import locks
from inventory.locks.wire import lock_key
from inventory.models import Reservation
from inventory.services import stock_adjust, stock_reserve, stock_restock
from orders import services
from orders.models import Order
from shop.models import ProductVariant
from tests.conftest import assert_books_balance, pay, stock_of
from tests.race import run_parallel, run_process

pytestmark = pytest.mark.django_db(transaction=True)


def place(key: str, quantity: int = 1, sku: str = "HOT") -> Order:
    return services.order_place(
        email=f"{key}@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key
    )


def marked(sku: str = "HOT") -> bool:
    return caches[settings.LOCK_CACHE_ALIAS].get(f"stock-lock:{sku}:soldout") is not None


def refused(key: str, quantity: int = 1) -> dict:
    with pytest.raises(DomainError) as caught:
        place(key, quantity)
    return caught.value.as_dict()


@pytest.fixture
def sold_out(make_variant):
    """HOT with its two units sold to two orders, and so marked."""
    hot = make_variant(sku="HOT", stock=2)
    orders = [place("first"), place("second")]
    assert marked()
    return hot, orders


def test_the_commit_that_takes_the_last_unit_marks_the_sku_for_a_short_while(make_variant):
    make_variant(sku="HOT", stock=3)
    place("a", 2)
    assert not marked()
    place("b", 1)
    assert marked()
    ttl_ms = (
        caches[settings.LOCK_CACHE_ALIAS]
        .client.get_client()
        .pttl(caches[settings.LOCK_CACHE_ALIAS].make_key("stock-lock:HOT:soldout"))
    )
    assert 0 < ttl_ms <= settings.SOLD_OUT_MARK_SECONDS * 1000


def test_a_refusal_on_a_marked_sku_takes_no_lock_and_opens_no_transaction(sold_out):
    with redis_round_trips() as redis_sent, CaptureQueriesContext(connection) as queries:
        answer = refused("late", 2)

    assert answer["code"] == "insufficient_stock"
    assert answer["shortages"] == [{"sku": "HOT", "requested": 2, "available": 0}]
    # The round trip that would have queued us answered instead: no lock taken, no queue joined.
    assert redis_sent == ["CLIENT+EVALSHA+BLPOP"]
    assert _lock_keys() == [lock_key_of("HOT") + ":soldout"]  # nothing of ours left beside the mark
    # Only the look-up of an order placed earlier under the same key (a retry is told its order).
    assert [q["sql"].split()[0] for q in queries] == ["SELECT"], [q["sql"][:60] for q in queries]

    with redis_round_trips() as redis_sent:
        assert refused("later")["code"] == "insufficient_stock"
    assert redis_sent == ["MGET"]  # having seen the mark, this process reads it first: Redis's cheapest answer


def test_an_order_over_several_skus_is_refused_by_the_round_trip_that_would_lock_them(sold_out, make_variant):
    make_variant(sku="MUG", stock=5)
    with redis_round_trips() as redis_sent, pytest.raises(DomainError) as refusal:
        services.order_place(
            email="late@example.com",
            items=[{"sku": "MUG", "quantity": 1}, {"sku": "HOT", "quantity": 3}],
            idempotency_key="late",
        )

    assert refusal.value.payload["shortages"] == [{"sku": "HOT", "requested": 3, "available": 0}]
    assert redis_sent == ["EVALSHA"]  # take_free.lua read the marks and took nothing
    assert _lock_keys() == [lock_key_of("HOT") + ":soldout"]  # nothing locked or queued
    assert stock_of(ProductVariant.objects.get(sku="MUG")).reserved == 0


def test_a_marked_sku_refuses_at_once_even_while_its_lock_is_held_and_on_the_last_try():
    """A buyer behind a holder is refused without queueing, whether its first try waits or is its last."""
    client = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)
    client.set(lock_key_of("HOT"), b"someone-else", px=10_000)
    locks.sold_out_mark({"HOT": 5})

    for wait in (5, 0):
        started = time.monotonic()
        with pytest.raises(locks.MarkedSoldOut):
            with locks.sku_lock_serving("HOT", kind="order", body=b"{}", wait=wait, refuse_sold_out=True):
                pytest.fail("served on a marked SKU")
        assert time.monotonic() - started < 1  # not the wait
    assert client.get(lock_key_of("HOT")) == b"someone-else"
    assert _lock_keys() == sorted([lock_key_of("HOT"), lock_key_of("HOT") + ":soldout"])  # never queued


def test_a_section_that_may_free_units_takes_the_lock_of_a_marked_sku():
    locks.sold_out_mark({"HOT": 5})
    with locks.sku_locks(["HOT"]):
        assert locks.held_skus() == {"HOT"}
    with locks.sku_lock_serving("HOT", kind="order", body=b"{}", wait=1) as (lock, _):
        assert lock is not None  # asked without refuse_sold_out: the mark is not its business


def lock_key_of(sku: str) -> str:
    return caches[settings.LOCK_CACHE_ALIAS].make_key(lock_key(sku))


def _lock_keys() -> list[str]:
    client = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)
    return sorted(key.decode() for key in client.scan_iter(match=lock_key_of("*"), count=500))


def test_a_retry_of_an_order_placed_before_the_sell_out_is_still_told_its_order(sold_out):
    _, (_, second) = sold_out
    assert place("second").number == second.number


def test_the_mark_never_outlives_the_first_reservation_due_to_expire(make_variant):
    make_variant(sku="HOT", stock=1)
    soon = place("soon")
    Reservation.objects.filter(order_line__order=soon).update(expires_at=timezone.now() + timedelta(seconds=1))
    locks.sold_out_clear(["HOT"])
    with pytest.raises(DomainError):
        place("refused")  # the refusal, on counts read under the lock, marks HOT again
    ttl_ms = (
        caches[settings.LOCK_CACHE_ALIAS]
        .client.get_client()
        .pttl(caches[settings.LOCK_CACHE_ALIAS].make_key("stock-lock:HOT:soldout"))
    )
    assert 0 < ttl_ms <= 1000


def _cancel(orders):
    services.order_cancel(order=orders[0])


def _expire(orders):
    past = timezone.now() - timedelta(seconds=1)
    Order.objects.filter(pk=orders[0].pk).update(expires_at=past)  # the mark is still there: worst case
    assert services.order_expire(order=Order.objects.get(pk=orders[0].pk))


def _fail_payment(orders):
    pay(orders[0], decline=True)


def _restock(orders):
    stock_restock(sku="HOT", quantity=1)


def _admin_edit(orders):
    stock_adjust(sku="HOT", delta=1, reason="found one")


@pytest.mark.parametrize("frees_a_unit", [_cancel, _expire, _fail_payment, _restock, _admin_edit])
def test_whatever_frees_a_unit_clears_the_mark_and_the_unit_sells(sold_out, frees_a_unit, celery_eager):
    hot, orders = sold_out
    refused("refused")  # this process has seen the mark, and looks for it first from now on
    frees_a_unit(orders)

    assert not marked()
    place("next")
    assert marked()  # and it is sold out again
    assert_books_balance(hot)


def _buy_until_served(worker: int, until: float) -> tuple[int, int]:
    """Keep trying to buy one unit until one is ours or time is up: (refusals, units bought)."""
    refusals = 0
    for attempt in range(100_000):
        try:
            place(f"w{worker}-{attempt}")
            return refusals, 1
        except DomainError as exc:
            assert exc.code == "insufficient_stock", exc.as_dict()
            refusals += 1
            if time.time() > until:
                return refusals, 0
    return refusals, 0


def _restock_later(units: int) -> None:
    time.sleep(0.5)
    stock_restock(sku="HOT", quantity=units)


def test_a_restock_racing_a_flood_of_refusals_ends_with_the_new_units_sold(sold_out):
    hot, _ = sold_out
    jobs = [{"func": "buy", "worker": n} for n in range(6)] + [{"func": "restock"}]

    results = run_parallel(_flood_job, jobs, processes=7)

    refusals, bought = (sum(r[i] for r in results[:-1]) for i in (0, 1))
    assert refusals > 0  # the flood was refused while HOT was sold out
    assert bought == 4  # every restocked unit sold, none twice
    stock = stock_of(hot)
    assert (stock.on_hand, stock.reserved) == (6, 6)
    assert_books_balance(hot)


def _flood_job(func: str, worker: int = 0):
    if func == "restock":
        _restock_later(4)
        return (0, 0)
    return _buy_until_served(worker, until=time.time() + 5)


def _sell_last_unit_then_die() -> None:
    def die(_seconds):
        os._exit(3)  # after the commit, before the mark is set and the lock released

    locks.sold_out_mark = die
    place("last")


def test_a_crash_between_the_commit_and_the_mark_changes_nothing_but_speed(make_variant, settings):
    settings.LOCK_TTL_SECONDS, settings.LOCK_WAIT_SECONDS = 1.0, 0.5
    hot = make_variant(sku="HOT", stock=1)

    assert run_process(_sell_last_unit_then_die) == 3

    assert Order.objects.filter(idempotency_key="last").exists() and not marked()
    time.sleep(settings.LOCK_TTL_SECONDS)  # the dead holder's lock expires
    assert refused("after")["shortages"] == [{"sku": "HOT", "requested": 1, "available": 0}]
    assert marked()  # the slow path's refusal marked it
    assert (stock_of(hot).on_hand, stock_of(hot).reserved) == (1, 1)
    assert_books_balance(hot)


def test_reserving_an_orders_lines_again_on_a_marked_sku_is_refused_from_redis(sold_out):
    hot, (first, _) = sold_out
    _expire([first])  # frees its unit and clears the mark; the next order sells it out again
    place("third")
    assert marked()
    first = Order.objects.prefetch_related("lines__variant").get(pk=first.pk)

    with redis_round_trips() as redis_sent, CaptureQueriesContext(connection) as queries:
        with pytest.raises(DomainError) as refusal:
            stock_reserve(order=first, expires_at=timezone.now() + timedelta(minutes=15))

    assert refusal.value.payload["shortages"] == [{"sku": "HOT", "requested": 1, "available": 0}]
    assert (redis_sent, len(queries)) == (["CLIENT+EVALSHA+BLPOP"], 0)
    assert_books_balance(hot)


def test_a_refusal_from_the_mark_leaves_no_garbage_for_the_collector(sold_out):
    """A crowd's refusals must not pile up reference cycles: the collector's full passes stall a busy process."""
    hot, (first, _) = sold_out
    first = Order.objects.prefetch_related("lines__variant").get(pk=first.pk)
    expires_at = timezone.now() + timedelta(minutes=15)
    gc.collect()

    for _ in range(20):
        with pytest.raises(DomainError):
            stock_reserve(order=first, expires_at=expires_at)

    assert gc.collect() == 0
