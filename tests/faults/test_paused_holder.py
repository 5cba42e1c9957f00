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
    """Place ``ORDER``, stalling inside the section; put on ``out`` what its guarded write did (the
    error that refused it, or whether it reserved) and the order number it was told (or the error)."""
    write, writes = inventory.sql.reserved_add_if_free, []

    def freeze_then_write(**kwargs):
        # The units are there as we set out to take one; we stall, holding the lock, until SIGCONT.
        os.kill(os.getpid(), signal.SIGSTOP)
        try:
            reserved = write(**kwargs)
        except Exception as exc:
            writes.append(type(exc).__name__)
            raise
        writes.append("refused" if reserved.refused else "reserved")
        return reserved

    inventory.sql.reserved_add_if_free = freeze_then_write
    try:
        told = order_place(**ORDER).number
    except Exception as exc:  # no order: what it was told instead
        told = repr(exc)
    out.put((writes, told))


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


# The stale holder's order goes in with its guarded write, in one round trip: whatever the stock, the
# unique idempotency key refuses it before the guard is reached, and nothing of it is written.
@pytest.mark.parametrize("stock", [1, 2], ids=["last-unit", "units-left"])
def test_a_holder_paused_past_its_lock_ttl_cannot_write_when_it_wakes_up(make_variant, settings, stock):
    """The buyer retries the stalled request with its key and gets a unit. The stale holder's write,
    when it wakes, is refused by the unique key, which undoes it; the refusal finds the order under
    the key and answers with it."""
    settings.LOCK_TTL_SECONDS = 1.0
    mug = make_variant(sku="MUG", stock=stock)
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
    assert writes == ["IntegrityError"]  # the stale holder woke up and tried once; the unique key refused it
    assert told == fresh.number  # a replay: the order its key got meanwhile
    assert list(Order.objects.values_list("idempotency_key", "number")) == [("k-1", fresh.number)]
    assert (stock_of(mug).reserved, stock_of(mug).on_hand) == (1, stock)
    assert_books(mug)
