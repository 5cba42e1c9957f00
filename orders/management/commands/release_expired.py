import sys

from django.core.management.base import BaseCommand
from tqdm import tqdm

from core.commands import int_between
from orders.selectors import order_list_overdue
from orders.services import order_release_expired


class Command(BaseCommand):
    help = (
        "Expire unpaid orders past their reservation and release their stock through the inventory "
        "service, in batches. The Celery beat sweep calls the same service function."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="only report what would be released")
        parser.add_argument(
            "--batch", type=int_between(1, 10_000), default=100, metavar="N", help="orders per batch (100)"
        )

    def handle(self, *args, dry_run, batch, **options):
        total = order_list_overdue().count()
        with tqdm(total=total, unit="order", disable=total < 2 * batch, file=sys.stderr) as bar:
            sweep = order_release_expired(batch_size=batch, dry_run=dry_run, progress=bar.update)
        verb = "Would expire" if dry_run else "Expired"
        self.stdout.write(self.style.SUCCESS(f"{verb} {sweep.done} order(s), releasing {sweep.units} unit(s)."))
        if sweep.skipped:
            self.stdout.write(
                self.style.WARNING(f"Skipped {len(sweep.skipped)} busy order(s), left for the next sweep: ")
                + ", ".join(sweep.skipped[:20])
            )
