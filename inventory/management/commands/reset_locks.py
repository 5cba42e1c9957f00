from django.core.management.base import BaseCommand, CommandError

from inventory.locks import lock_clear_all, lock_list


class Command(BaseCommand):
    help = (
        "Clear stale stock lock keys after an incident. Refuses while any lock is held (a holder may be "
        "mid-transaction) unless --force; locks expire on their own after LOCK_TTL_SECONDS anyway."
    )

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="also delete locks that are held right now")

    def handle(self, *args, force, **options):
        held = lock_list()
        for lock in held:
            self.stdout.write(f"held: {lock['sku']} ({lock['ttl_ms']} ms left, {lock['waiters']} waiting)")
        if held and not force:
            raise CommandError(
                f"{len(held)} lock(s) held right now; they expire by themselves. Use --force only if "
                "their holders are known to be dead.",
                returncode=1,
            )
        cleared = lock_clear_all(force=force)
        self.stdout.write(self.style.SUCCESS(f"Cleared {cleared} lock key(s)."))
