"""Kleppmann's scenario: a lock holder is paused (a GC pause, a VM migration, SIGSTOP) past its lock's
TTL, another process takes the lock and the stock, and then the paused one wakes up and writes.
Its write must be refused: the guarded UPDATE checks the stock as it is now, not as it was when the
holder set out to write."""

import os
import signal
import time
from pathlib import Path

import pytest

import inventory.services
from inventory.errors import InsufficientStock
from orders.models import Order
from orders.services import order_place
from tests.conftest import stock_of
from tests.faults.conftest import assert_books
from tests.processes import wait_for
from tests.race import start_process

pytestmark = pytest.mark.django_db(transaction=True)

PLACED, REFUSED = 0, 3


def _buy_and_freeze_before_writing(sku):
    write = inventory.services._stock_reserve_guarded_all

    def freeze_then_write(product_id, quantity):
        # The last unit is there as we set out to take it; we stall, holding the lock, until SIGCONT.
        os.kill(os.getpid(), signal.SIGSTOP)
        return write(product_id, quantity)

    inventory.services._stock_reserve_guarded_all = freeze_then_write
    try:
        order_place(email="stale@example.com", items=[{"sku": sku, "quantity": 1}], idempotency_key="stale")
    except InsufficientStock:
        os._exit(REFUSED)
    os._exit(PLACED)


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_holder_paused_past_its_lock_ttl_cannot_write_when_it_wakes_up(make_product, settings):
    settings.LOCK_TTL_SECONDS = 1.0
    mug = make_product(sku="MUG", stock=1)
    stale = start_process(_buy_and_freeze_before_writing, sku="MUG")
    try:
        wait_for(lambda: stopped(stale.pid), timeout=30, what="the holder to stop inside its section")
        started = time.monotonic()
        fresh = order_place(email="fresh@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="fresh")
        waited = time.monotonic() - started
    finally:
        os.kill(stale.pid, signal.SIGCONT)
        stale.join(30)
        if stale.exitcode is None:
            stale.kill()

    assert waited < settings.LOCK_TTL_SECONDS + 1  # the fresh buyer got the lock once the stale one's expired
    assert stale.exitcode == REFUSED  # the stale holder woke up, tried to write and was refused
    assert list(Order.objects.values_list("number", flat=True)) == [fresh.number]
    assert stock_of(mug).reserved == 1 == stock_of(mug).on_hand
    assert_books(mug)
