"""The stock section: every stock change runs inside it.

It takes the Redis locks of the SKUs involved (sorted, with a bounded wait: ``inventory.locks``;
in a Redis outage the stock rows' locks, taken first thing in the transaction), then opens a
*durable* transaction inside them, so the commit happens while the locks are held
(the reverse, seed 000's ``sell3``, lets the next holder read rows before our commit). Inside it,
counters change only through conditional UPDATEs guarded in SQL, under CHECK constraints: the lock
is the fast path, the guard is what makes an expired or lost lock unable to oversell. Holding the
locks, a section that may free units clears the SKUs' sold-out marks first.
"""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import transaction

from core.logcontext import section_skus
from inventory import locks


@contextmanager
def stock_section(*, skus: Iterable[str], lock_wait: float | None = None, takes_only: bool = False) -> Iterator[None]:
    """Lock the SKUs, then open the transaction: the commit happens before the locks go.

    ``takes_only``: the section only reserves units (placing, reserving), so it leaves the SKUs'
    sold-out marks as they are, and a SKU marked sold out raises ``locks.MarkedSoldOut`` before
    anything is locked; every other section clears the marks before it may free a unit.

    ``durable=True`` refuses to run inside an outer transaction (``ATOMIC_REQUESTS``, a caller's
    ``atomic``), whose commit would come after the release. A service called from inside another
    service's section for the same SKUs joins it instead.
    """
    skus = set(skus)
    held = locks.held_skus()
    if held and skus <= held and transaction.get_connection().in_atomic_block:
        yield
        return
    named = section_skus.set(tuple(sorted(skus)))  # what its log lines are about (core.logcontext)
    try:
        refuse_sold_out = takes_only and settings.SOLD_OUT_MARK_SECONDS > 0
        with locks.sku_locks(skus, wait=lock_wait, refuse_sold_out=refuse_sold_out) as held:
            if not takes_only:
                locks.sold_out_clear(skus)  # inventory.locks.soldout
            with transaction.atomic(durable=True):
                held.rows_lock()  # in a Redis outage: the stock rows' locks instead (inventory.locks.outage)
                yield
    finally:
        section_skus.reset(named)
