import logging

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from inventory.errors import DomainError
from inventory.selectors import stock_books
from inventory.services import stock_rebuild_from_ledger
from orders.selectors import order_list_stuck_holding_stock
from orders.services import order_reservations_settle

logger = logging.getLogger("inventory.reconcile")


class Command(BaseCommand):
    help = (
        "Check the books: stock counters against the ledger, reserved against active reservations, and "
        "that no paid, cancelled, expired or failed order still holds stock (a failed payment's queued "
        "release gets two sweep intervals). Exits 1 on any drift. "
        "--fix settles such orders and rebuilds drifted counters from the ledger, under the locks."
    )

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="repair what can be repaired, then check again")

    def handle(self, *args, fix, **options):
        drifted, holding = self.check_books()
        if fix and (drifted or holding):
            self.repair(drifted, holding)
            drifted, holding = self.check_books()
        if drifted or holding:
            raise CommandError("The books do not balance (see above).", returncode=1)

    def check_books(self):
        books = stock_books()
        drifted = [row for row in books if row.drifted]
        holding = list(order_list_stuck_holding_stock())
        self.stdout.write(
            f"{'SKU':<24} {'on hand':>9} {'ledger':>9} {'reserved':>9} {'ledger':>9} {'active':>9}  status"
        )
        for row in books:
            status = self.style.ERROR("DRIFT") if row.drifted else self.style.SUCCESS("ok")
            self.stdout.write(
                f"{row.sku:<24} {row.on_hand:>9} {row.ledger_on_hand:>9} {row.reserved:>9} "
                f"{row.ledger_reserved:>9} {row.active_reserved:>9}  {status}"
            )
        for order in holding:
            self.stdout.write(self.style.ERROR(f"Order {order.number} is {order.status} but still holds stock."))
        for row in drifted:
            logger.error("stock drift %s", row.describe())
        summary = f"{len(books)} stock(s) checked, {len(drifted)} drifted, {len(holding)} final order(s) holding stock."
        self.stdout.write(self.style.ERROR(summary) if drifted or holding else self.style.SUCCESS(summary))
        return drifted, holding

    def repair(self, drifted, holding):
        with tqdm(total=len(drifted) + len(holding), unit="fix", disable=len(drifted) + len(holding) < 20) as bar:
            for order in holding:
                order_reservations_settle(order=order)
                bar.update()
            for row in drifted:
                try:
                    stock_rebuild_from_ledger(sku=row.sku)
                except DomainError as exc:
                    self.stderr.write(f"{row.sku}: {exc.as_text()}")
                bar.update()
        self.stdout.write("Repaired; checking again:")
