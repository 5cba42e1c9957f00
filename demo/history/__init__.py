"""A made-up order history written straight into the tables, to measure the shop at scale (``manage.py seed_history``).

Orders of the past year in every status, with their lines, reservations, ledger rows, payments,
shipments, refunds and the records of the emails sent, each as the services leave them: one
reservation per line, whose state follows the order's status; a ``reserve`` ledger row per
reservation, then its ``commit`` row (paid, shipped, refunded) or its ``release`` row with the reason
(cancelled, expired, payment failed); paid orders with their captured payment, shipped ones with a
shipment, refunded ones refunded in full without restocking. The stock the orders take arrives first,
through ``restock`` ledger rows, and the counters move by the sums written, so ``reconcile`` finds the
books balanced. Orders are priced by ``orders.pricing``'s rule at the shop's tax rates, shipped to
``SHOP_COUNTRY`` by its cheapest method (one is made if none goes there). Last come the orders awaiting
payment: placed within the past half of the reservation's lifetime, or overdue (expired within the past
hour).

Loaded a chunk of orders per transaction, each table's rows as one tab-separated text (``LOAD DATA LOCAL
INFILE``: the server parses it faster than the same rows as INSERTs), with every id chosen here, above
the largest stored, so that rows name each other without reading anything back. Every value in the text
is made here (numbers, timestamps, choices' values, text from fixed alphabets); text from the database or
the settings is escaped once, at setup. Writer threads load chunks, each on a connection of its own,
while the next chunk is built; those connections check no foreign keys (every id is one this run chose),
and a load that skips or alters a row (with LOCAL the server only warns) fails its chunk. Nothing makes
the server read an index page per row once the tables outgrow its memory: order numbers rise with the
ids, and the unique index of the idempotency keys, whose hashes are random, is built again at the end.

For MySQL/MariaDB (``local_infile`` on), on a database no one else writes to meanwhile. Interrupted, it
leaves whole chunks of orders with their ledger rows, and counters not yet moved: ``reconcile --fix``
sets them from the ledger.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection

from core.db import statements_run
from demo.history.buyers import buyers_seed
from demo.history.catalog import catalog_seed
from demo.history.loading import HistoryLoadRefused, chunks_load, unique_deferred
from demo.history.rows import History
from orders.models import Order

MAX_ORDERS = 100_000_000
MAX_SKUS = 100_000
IDEMPOTENCY_UNIQUE = "order_idempotency_key_per_customer"
AWAITING_PER_ORDERS = 100  # one order in this many awaits payment (at least the overdue ones asked for)
AWAITING_PER_OVERDUE = 10  # unless told, one order awaiting payment in this many is overdue


def history_awaiting(*, orders: int, overdue: int | None) -> tuple[int, int]:
    """How many of ``orders`` await payment, and how many of those are overdue (``overdue``, or a tenth)."""
    awaiting = min(orders, max(math.ceil(orders / AWAITING_PER_ORDERS), overdue or 0))
    return awaiting, math.ceil(awaiting / AWAITING_PER_OVERDUE) if overdue is None else overdue


@dataclass(frozen=True)
class HistoryWritten:
    orders: int
    overdue: int
    rows: int  # every row loaded: orders, lines, reservations, ledger, payments, shipments, refunds, emails
    seconds: float


def history_write(
    *, orders: int, skus: int, overdue: int | None = None, seed: int = 1, progress: Callable[[int], None]
) -> HistoryWritten:
    """Write ``orders`` orders over ``skus`` SKUs (made unless they exist), ``overdue`` of them overdue, as
    the module says; ``progress`` is told the orders of each chunk committed. The caller checks the bounds."""
    started = time.monotonic()
    [[(local_files,)]] = statements_run(connection.alias, [("SELECT @@local_infile", [])])
    if not local_files:
        raise HistoryLoadRefused("The server loads no local files: set local_infile=ON.")
    awaiting, overdue = history_awaiting(orders=orders, overdue=overdue)
    history = History(catalog=catalog_seed(skus), buyers=buyers_seed(orders), seed=seed)
    with unique_deferred(Order, IDEMPOTENCY_UNIQUE):
        rows = chunks_load(history.chunks(orders=orders, awaiting=awaiting, overdue=overdue), progress=progress)
    history.stock_counters_move()
    return HistoryWritten(orders=orders, overdue=overdue, rows=rows, seconds=time.monotonic() - started)
