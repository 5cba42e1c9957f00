import os

from django.core.management.base import BaseCommand

from demo.catalog import demo_catalog_seed
from demo.drop import DEMO_DROP_NAME, demo_drop_seed
from demo.vouchers import voucher_demo_seed


class Command(BaseCommand):
    help = (
        "Create a demo catalog with stock, the vouchers DROP10 and SHIPFREE, a drop (the Drop sneaker's sizes "
        "sell through its line, open at once), and a staff user named 'staff'. "
        "Safe to run again: existing "
        "products keep their stock. The staff password comes from DEMO_STAFF_PASSWORD, or is generated "
        "and printed when the user is created."
    )

    def handle(self, *args, **options):
        seed = demo_catalog_seed(staff_password=os.environ.get("DEMO_STAFF_PASSWORD") or None)
        self.stdout.write(
            self.style.SUCCESS(
                f"Products: {seed.products_created} created, {seed.products_existing} already there; "
                f"variants: {seed.variants_created} created, {seed.variants_existing} already there."
            )
        )
        self.stdout.write(f"Vouchers: {voucher_demo_seed()} created (DROP10: 10% off, SHIPFREE: free shipping).")
        if drop := demo_drop_seed():
            self.stdout.write(f"Drop: {DEMO_DROP_NAME} created; its line is open at /drops/{drop.pk}/.")
        if seed.staff_password and not os.environ.get("DEMO_STAFF_PASSWORD"):
            self.stdout.write(f"Staff user: {seed.staff_username} / password: {seed.staff_password}")
        elif seed.staff_password:
            self.stdout.write(f"Staff user: {seed.staff_username} (password from DEMO_STAFF_PASSWORD)")
        else:
            self.stdout.write(f"Staff user: {seed.staff_username} (exists; password unchanged)")
