import logging

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from core.clock import db_now
from core.errors import DomainError
from core.metrics import DRIFT_FOUND
from inventory.models import Stock
from inventory.selectors import ledger_bases, ledger_checkpoint_list_unverified, stock_books
from inventory.services import ledger_checkpoint_rebuild, stock_rebuild_from_ledger
from orders.models import Order
from orders.selectors import order_list_deleted_holding_stock, order_list_stuck_holding_stock
from orders.services import order_reservations_settle
from orders.services.reconciling import reconcile_passed, reconcile_since
from payments.drift import order_line_list_units_broken, order_list_refund_drift, payment_list_refund_drift
from vouchers.selectors import voucher_books
from vouchers.services import voucher_rebuild_from_ledger

logger = logging.getLogger("orders.reconcile")


class Command(BaseCommand):
    help = (
        "Check the books: stock counters against the ledger, reserved against active reservations, voucher "
        "use counters against their uses, orders' refunded amounts and units against their refunds, each "
        "line's units shipped, returned, refunded and restocked against the unit rule (orders.units), and "
        "that no paid, cancelled, expired or failed order, and no deleted order, still holds stock (a failed "
        "payment's queued release gets two sweep intervals); payments' refunds, as their provider tells them, "
        "against their orders' refunds. Exits 1 on any drift. "
        "The ledger is read from each stock's last checkpoint on (the reconcile task moves them forward), and "
        "only the vouchers and the refunded orders changed since the last run that found them clean; "
        "--full reads all of them and verifies the checkpoints too. "
        "--fix settles such orders, restores deleted ones still awaiting payment, and rebuilds drifted "
        "counters from the ledger (voucher counters from their uses, checkpoints from the whole ledger), "
        "under the locks."
    )

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="repair what can be repaired, then check again")
        parser.add_argument(
            "--full",
            action="store_true",
            help="sum the whole ledger, not from the checkpoints, and verify them; check every voucher and refund",
        )

    def handle(self, *args, fix, full, **options):
        self.full = full
        self.summed = ledger_bases(full=True) if full else None  # the whole ledger, read once
        checkpoints = self.check_checkpoints() if full else []
        drifted, holding, hidden = self.check_books()
        vouchers = self.check_vouchers()
        refunds = self.check_refunds()  # money: shown for staff, never "fixed" here
        units = self.check_units()  # units shipped, returned, refunded, restocked: shown for staff too
        DRIFT_FOUND.inc(len(checkpoints) + len(drifted) + len(holding) + len(hidden) + len(vouchers))
        if fix and (checkpoints or drifted or holding or hidden or vouchers):
            for row in checkpoints:
                ledger_checkpoint_rebuild(stock=Stock.objects.select_related("variant").get(variant__sku=row.sku))
            self.repair(drifted, holding + hidden)
            for row in vouchers:
                voucher_rebuild_from_ledger(code=row.code)
            self.summed = ledger_bases(full=True) if full else None
            checkpoints = self.check_checkpoints() if full else []
            drifted, holding, hidden = self.check_books()
            vouchers = self.check_vouchers()
        if checkpoints or drifted or holding or hidden or vouchers or refunds or units:
            raise CommandError("The books do not balance (see above).", returncode=1)

    def check_checkpoints(self):
        """Checkpoints that disagree with the movements they cover; each printed and logged."""
        wrong = ledger_checkpoint_list_unverified(summed=self.summed)
        for row in wrong:
            self.stdout.write(self.style.ERROR(f"DRIFT checkpoint {row.describe()}"))
            logger.error("ledger checkpoint drift %s", row.describe())
        summary = f"Ledger checkpoints: {len(wrong)} disagree with the ledger."
        self.stdout.write(self.style.ERROR(summary) if wrong else self.style.SUCCESS(summary))
        return wrong

    def check_books(self):
        books = stock_books(bases=self.summed)
        drifted = [row for row in books if row.drifted]
        holding = list(order_list_stuck_holding_stock())
        hidden = list(order_list_deleted_holding_stock())
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
        for order in hidden:
            self.stdout.write(
                self.style.ERROR(f"Order {order.number} is {order.status} and deleted but still holds stock.")
            )
            logger.error("deleted order %s (%s) still holds stock; no sweep releases it", order.number, order.status)
        for row in drifted:
            logger.error("stock drift %s", row.describe())
        summary = (
            f"{len(books)} stock(s) checked, {len(drifted)} drifted, {len(holding)} final order(s) holding stock, "
            f"{len(hidden)} deleted order(s) holding stock."
        )
        self.stdout.write(self.style.ERROR(summary) if drifted or holding or hidden else self.style.SUCCESS(summary))
        return drifted, holding, hidden

    def since(self, check: str):
        """Where ``check`` reads from, said in the output: its last clean run (``reconcile_since``), or None
        (everything) with --full or when no clean run is known."""
        since = None if self.full else reconcile_since(check=check)
        read = f"changed since {since:%Y-%m-%d %H:%M:%S} UTC (its last clean run, less the margin)" if since else "all"
        self.stdout.write(f"{check.capitalize()} read: {read}.")
        return since

    def check_vouchers(self):
        """Vouchers whose use counters disagree with their uses; each printed and logged."""
        started = db_now()
        books = voucher_books(since=self.since("vouchers"))
        drifted = [row for row in books if row.drifted]
        for row in drifted:
            self.stdout.write(self.style.ERROR(f"DRIFT {row.describe()}"))
            logger.error("voucher drift %s", row.describe())
        summary = f"{len(books)} voucher(s) checked, {len(drifted)} drifted."
        self.stdout.write(self.style.ERROR(summary) if drifted else self.style.SUCCESS(summary))
        if not drifted:
            reconcile_passed(check="vouchers", started=started)
        return drifted

    def check_refunds(self) -> bool:
        """Whether any order's refunded amount, or line's refunded units, differ from its refunds, or a payment's
        refunds as its provider tells them from the order's; each printed and logged."""
        started = db_now()
        since = self.since("refunds")
        orders, lines = order_list_refund_drift(since=since)
        payments = payment_list_refund_drift(since=since)  # the provider's word against the order's refunds
        for row in payments:
            self.stdout.write(self.style.ERROR(f"DRIFT {row.describe()}"))
            logger.error("refund drift: %s", row.describe())
        for order in orders:
            self.stdout.write(
                self.style.ERROR(
                    f"DRIFT order {order.number}: refunded {order.amount_refunded}, refunds {order.refunds_sum}"
                )
            )
            logger.error(
                "refund drift: order %s refunded %s, its refunds %s",
                order.number,
                order.amount_refunded,
                order.refunds_sum,
            )
        for line in lines:
            self.stdout.write(
                self.style.ERROR(
                    f"DRIFT order {line.order.number} {line.variant.sku}: {line.quantity_refunded} unit(s) refunded, "
                    f"refunds {line.refund_units}"
                )
            )
            logger.error("refund drift: order %s line %s", line.order.number, line.variant.sku)
        summary = f"Refunds: {len(orders)} order(s) and {len(lines)} line(s) drifted."
        self.stdout.write(self.style.ERROR(summary) if orders or lines else self.style.SUCCESS(summary))
        summary = f"Payments: {len(payments)} refunded otherwise than their orders book."
        self.stdout.write(self.style.ERROR(summary) if payments else self.style.SUCCESS(summary))
        drifted = bool(orders or lines or payments)
        if not drifted:
            reconcile_passed(check="refunds", started=started)
        return drifted

    def check_units(self) -> bool:
        """Whether any order line breaks the unit rule (``orders.units``); each printed and logged."""
        started = db_now()
        lines = order_line_list_units_broken(since=self.since("units"))
        for line in lines:
            said = f"order {line.order.number} {line.variant.sku}: {'; '.join(line.problems)}"
            self.stdout.write(self.style.ERROR(f"UNITS {said}"))
            logger.error("unit rule broken: %s", said)
        summary = f"Units: {len(lines)} order line(s) break the unit rule."
        self.stdout.write(self.style.ERROR(summary) if lines else self.style.SUCCESS(summary))
        if not lines:
            reconcile_passed(check="units", started=started)
        return bool(lines)

    def repair(self, drifted, orders):
        with tqdm(total=len(drifted) + len(orders), unit="fix", disable=len(drifted) + len(orders) < 20) as bar:
            for order in orders:
                self.settle(order)
                bar.update()
            for row in drifted:
                try:
                    stock_rebuild_from_ledger(sku=row.sku)
                except DomainError as exc:
                    self.stderr.write(f"{row.sku}: {exc.as_text()}")
                bar.update()
        self.stdout.write("Repaired; checking again:")

    def settle(self, order):
        """A final order's stock follows its status. A deleted order awaiting payment is restored instead.

        Its delete lost to a payment (a customer may be paying right now), so the shop treats it as the
        open order it is: visible again, it can be paid, or the expiry sweep releases its stock when due.
        Staff can cancel it, or delete it again once it is final.
        """
        if order.is_deleted and order.status == Order.Status.AWAITING_PAYMENT:
            order.restore()
            logger.warning("order %s restored: deleted while awaiting payment, it held stock", order.number)
            self.stdout.write(f"Order {order.number} restored: it awaits payment and holds stock.")
        else:
            order_reservations_settle(order=order)
