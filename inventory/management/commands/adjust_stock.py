from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from inventory.services import stock_adjust


class Command(BaseCommand):
    help = "Correct a product's on-hand stock through the inventory service (locked, guarded, in the ledger)."

    def add_arguments(self, parser):
        parser.add_argument("sku")
        change = parser.add_mutually_exclusive_group(required=True)
        change.add_argument("--set", dest="set_to", type=int, metavar="N", help="set on-hand stock to N")
        change.add_argument("--delta", type=int, metavar="N", help="add N (negative to remove)")
        parser.add_argument("--reason", required=True, help="why the stock changes (kept in the ledger)")
        parser.add_argument(
            "--expected-version", type=int, metavar="V", help="refuse if the stock changed since you read version V"
        )
        parser.add_argument("--actor", metavar="USERNAME", help="the staff user to record in the ledger")

    def handle(self, *args, sku, set_to, delta, reason, expected_version, actor, **options):
        user = None
        if actor:
            user = get_user_model().objects.filter(username=actor).first()
            if user is None:
                raise CommandError(f"No user named {actor!r}.", returncode=2)
        try:
            stock = stock_adjust(
                sku=sku, set_to=set_to, delta=delta, reason=reason, expected_version=expected_version, actor=user
            )
        except DomainError as exc:
            raise CommandError(exc.as_text(), returncode=2) from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"{stock.variant.sku}: on hand {stock.on_hand}, reserved {stock.reserved}, "
                f"available {stock.available}, version {stock.version}"
            )
        )
