"""Kleppmann's scenario: a lock holder is paused (a GC pause, a VM migration, SIGSTOP) past its lock's
TTL, another process takes the lock and the stock, and then the paused one wakes up and writes.
Its write must be refused: the guarded UPDATE checks the stock as it is now, not as it was when the
holder set out to write. The rival is the buyer retrying the stalled request under its key, so what
the stale holder answers must be the one order placed under that key."""

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

import inventory.sql
from orders.models import Order
from orders.services import order_place
from tests.conftest import stock_of
from tests.faults.conftest import assert_books
from tests.processes import wait_for
from tests.race import start_process

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {"email": "buyer@example.com", "items": [{"sku": "MUG", "quantity": 1}], "idempotency_key": "k-1"}


def _buy_and_freeze_before_writing(out):
    """Place ``ORDER``, stalling inside the section; put on ``out`` what its guarded writes returned and
    the order number it was told (or the error)."""
    write, writes = inventory.sql.reserved_add_if_free, []

    def freeze_then_write(*, product_id, quantity):
        # The units are there as we set out to take one; we stall, holding the lock, until SIGCONT.
        os.kill(os.getpid(), signal.SIGSTOP)
        writes.append(write(product_id=product_id, quantity=quantity))
        return writes[-1]

    inventory.sql.reserved_add_if_free = freeze_then_write
    try:
        told = order_place(**ORDER).number
    except Exception as exc:  # no order: what it was told instead
        told = repr(exc)
    out.put((writes, told))


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


# What the stale holder's guarded write returns: None (refused), or the units it left free.
@pytest.mark.parametrize(("stock", "wrote"), [(1, None), (2, 0)], ids=["guard-refuses", "unique-key-refuses"])
def test_a_holder_paused_past_its_lock_ttl_cannot_write_when_it_wakes_up(make_product, settings, stock, wrote):
    """The buyer retries the stalled request with its key and gets a unit. With one unit the guard
    refuses the stale holder's write; with two the write goes in and the unique key refuses its copy of
    the order, undoing it. Either way the refusal finds the order under the key and answers with it."""
    settings.LOCK_TTL_SECONDS = 1.0
    mug = make_product(sku="MUG", stock=stock)
    out = multiprocessing.get_context("fork").Queue()
    stale = start_process(_buy_and_freeze_before_writing, out=out)
    try:
        wait_for(lambda: stopped(stale.pid), timeout=30, what="the holder to stop inside its section")
        started = time.monotonic()
        fresh = order_place(**ORDER)
        waited = time.monotonic() - started
    finally:
        os.kill(stale.pid, signal.SIGCONT)
        stale.join(30)
        if stale.exitcode is None:
            stale.kill()
    writes, told = out.get(timeout=10)

    assert waited < settings.LOCK_TTL_SECONDS + 1  # the fresh buyer got the lock once the stale one's expired
    assert writes == [wrote]  # the stale holder woke up and wrote once, to the stock as it is now
    assert told == fresh.number  # a replay: the order its key got meanwhile
    assert list(Order.objects.values_list("idempotency_key", "number")) == [("k-1", fresh.number)]
    assert (stock_of(mug).reserved, stock_of(mug).on_hand) == (1, stock)
    assert_books(mug)
