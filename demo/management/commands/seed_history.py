import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from tqdm import tqdm

from core.commands import int_between
from demo.history import MAX_ORDERS, MAX_SKUS, HistoryLoadRefused, history_awaiting, history_write
from fulfilment.models import Shipment, ShipmentLine
from inventory.models import Reservation, Stock, StockMovement
from orders.models import Order, OrderEmail, OrderLine
from payments.models import Payment, Refund, RefundLine

LOADED = (
    Order,
    OrderLine,
    Reservation,
    StockMovement,
    Stock,
    Payment,
    Shipment,
    ShipmentLine,
    Refund,
    RefundLine,
    OrderEmail,
)


class Command(BaseCommand):
    help = (
        "Write a made-up history of N orders over the past year, for benchmarks: over M SKUs (HIST-000001 on, "
        "made with their stock unless they exist) and up to a few thousand customers and guests, in every "
        "status, 1 to 3 lines each, with their reservations, stock ledger rows, payments, shipments and full "
        "refunds (not restocked) as the services leave them, the stock restocked ahead of the orders, so that "
        "`reconcile` finds the books balanced. A hundredth of the orders await payment (at least K), K of them "
        "overdue (by default a tenth). Loads with LOAD DATA LOCAL INFILE on MySQL/MariaDB, into a database no "
        "one else writes to meanwhile, without the orders' idempotency key index, which is built again at the "
        "end. Refuses a database that has orders unless --append. Interrupted, it leaves whole chunks of orders "
        "with their ledger rows: `reconcile --fix` then sets the stock counters from the ledger."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--orders", type=int_between(1, MAX_ORDERS), required=True, metavar="N", help="orders to write"
        )
        parser.add_argument("--skus", type=int_between(1, MAX_SKUS), required=True, metavar="M", help="SKUs they buy")
        parser.add_argument(
            "--overdue", type=int_between(0, MAX_ORDERS), metavar="K", help="orders awaiting payment past their expiry"
        )
        parser.add_argument("--seed", type=int, default=1, help="seed of the random draws (1)")
        parser.add_argument("--append", action="store_true", help="add to a database that has orders already")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (none off a terminal either)")

    def handle(self, *args, orders, skus, overdue, seed, append, no_progress, **options):
        if overdue is not None and overdue > orders:
            raise CommandError(f"--overdue must be at most --orders ({orders}).")
        if connection.vendor != "mysql":
            raise CommandError(f"seed_history loads MySQL/MariaDB tables; this database is {connection.vendor}.")
        if not append and Order.all_objects.exists():
            raise CommandError("The database has orders already: give --append to add to them.")
        awaiting, overdue = history_awaiting(orders=orders, overdue=overdue)
        try:
            with tqdm(total=orders, unit="order", disable=no_progress or not sys.stderr.isatty()) as bar:
                written = history_write(orders=orders, skus=skus, overdue=overdue, seed=seed, progress=bar.update)
        except HistoryLoadRefused as refusal:
            raise CommandError(str(refusal)) from refusal
        with connection.cursor() as cursor:  # statistics as of the load, or the optimiser plans for empty tables
            cursor.execute(f"ANALYZE TABLE {', '.join(connection.ops.quote_name(m._meta.db_table) for m in LOADED)}")
            cursor.fetchall()
        seconds = max(written.seconds, 1e-6)
        self.stdout.write(
            self.style.SUCCESS(
                f"{written.orders} orders ({awaiting} awaiting payment, {overdue} of them overdue) over {skus} SKUs: "
                f"{written.rows} rows in {written.seconds:.1f} s ({written.orders / seconds:,.0f} orders/s, "
                f"{written.rows / seconds:,.0f} rows/s)."
            )
        )
