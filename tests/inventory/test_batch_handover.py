"""A serving holder's release hands the lock *and* the requests queued behind it to the next buyer.

The new holder starts its transaction on waking and confirms its claim before the commit. These tests
pin what that must never cost: a buyer who dies (or stalls) after being handed a batch may delay the
batch by a claim, but never strands it for a lock TTL and never gets a request served twice.
"""

import multiprocessing
import os
import signal
import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from inventory import locks
from inventory.errors import DomainError
from inventory.locks import QueuedLock, lock_list
from inventory.models import Reservation
from inventory.services import stock_reserve
from orders.models import Order, OrderLine, new_order_number
from tests.conftest import assert_books_balance, stock_of
from tests.inventory.test_locks import full_key, redis_client

pytestmark = pytest.mark.django_db(transaction=True)


def _unreserved_order(product) -> Order:
    """An order for one unit of ``product`` with nothing reserved yet (what ``stock_reserve`` is given)."""
    order = Order.objects.create(
        number=new_order_number(),
        email="b@example.com",
        idempotency_key=uuid.uuid4().hex,
        idempotency_key_hash=uuid.uuid4().hex,
        idempotency_scope="email:b@example.com",
        request_fingerprint="-",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    OrderLine.objects.create(order=order, product=product, quantity=1, unit_price=1)
    return order


def _reserve_and_report(order_id, out, stall=0.0):
    """Reserve an order in this process; with ``stall``, sleep that long after being handed a batch."""
    connections.close_all()
    if stall:
        take = QueuedLock._take_handed

        def stalled(lock, *args, **kwargs):
            time.sleep(stall)  # descheduled between waking up and confirming the claim
            return take(lock, *args, **kwargs)

        QueuedLock._take_handed = stalled
    order = Order.objects.get(pk=order_id)
    try:
        out.put((order_id, len(stock_reserve(order=order, expires_at=order.expires_at))))
    except DomainError as exc:
        out.put((order_id, exc.code))


def _wait_for_waiters(count, timeout=20):
    deadline = time.monotonic() + timeout
    while not any(lock["waiters"] == count for lock in lock_list()):
        assert time.monotonic() < deadline, "buyers did not queue"
        time.sleep(0.02)


def _queue_behind_a_serving_holder(orders, out, *, first=None):
    """Hold HOT as a buyer serving its batch would; queue ``first`` (a process, started here) and then
    the ``orders``' buyers behind it; return the buyers and the time our release handed everything on.
    """
    context = multiprocessing.get_context("fork")
    buyers = []
    with locks.sku_lock_serving("HOT", kind="reserve", body=b"") as (lock, _):
        assert lock is not None
        connections.close_all()
        if first is not None:
            first()
            _wait_for_waiters(1)
        for order in orders:
            buyers.append(context.Process(target=_reserve_and_report, args=(order.pk, out)))
            buyers[-1].start()
        _wait_for_waiters(len(orders) + (first is not None))
    return buyers, time.monotonic()


def test_a_buyer_killed_in_the_queue_and_handed_a_batch_delays_it_by_a_claim_not_a_lock_ttl(make_product):
    hot = make_product(sku="HOT", stock=10)
    doomed, *orders = [_unreserved_order(hot) for _ in range(3)]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    victim = context.Process(target=_reserve_and_report, args=(doomed.pk, out))

    def queue_then_die():
        victim.start()
        _wait_for_waiters(1)
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()

    buyers, released = _queue_behind_a_serving_holder(orders, out, first=queue_then_die)
    # Our release handed the lock on a claim to the dead buyer, with both live buyers' requests.
    served_by = {redis_client().get(key) for key in redis_client().keys(full_key("HOT") + ":served:*")}
    assert len(served_by) == 1 and None not in served_by

    answers = dict(out.get(timeout=10) for _ in orders)
    waited = time.monotonic() - released
    for buyer in buyers:
        buyer.join(10)

    assert answers == {order.pk: 1 for order in orders}
    # The dead buyer never confirmed: once its claim lapsed, the live ones took their requests back.
    assert waited < settings.LOCK_HANDOFF_CLAIM_SECONDS + 1.5 < settings.LOCK_TTL_SECONDS
    assert not Reservation.objects.filter(order_line__order=doomed).exists()
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


def test_a_buyer_that_stalls_past_its_claim_rolls_back_the_batch_it_was_handed_and_nobody_is_served_twice(
    make_product,
):
    hot = make_product(sku="HOT", stock=10)
    slow, *orders = [_unreserved_order(hot) for _ in range(3)]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    stall = settings.LOCK_HANDOFF_CLAIM_SECONDS + 0.5
    staller = context.Process(target=_reserve_and_report, args=(slow.pk, out, stall))

    buyers, _ = _queue_behind_a_serving_holder(orders, out, first=staller.start)
    answers = dict(out.get(timeout=15) for _ in range(3))
    for process in [staller, *buyers]:
        process.join(10)

    # The stalled buyer woke with the batch after its claim had lapsed and the others had taken their
    # requests back (and reserved them). Its confirm failed, so it rolled the batch back and reserved
    # its own order alone: every order reserved exactly once.
    assert answers == {order.pk: 1 for order in [slow, *orders]}
    for order in [slow, *orders]:
        assert Reservation.objects.filter(order_line__order=order).count() == 1
    assert stock_of(hot).reserved == 3
    assert_books_balance(hot)
