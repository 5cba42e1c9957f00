from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class InventoryConfig(AppConfig):
    name = "inventory"

    def ready(self):
        from inventory.checks import lock_settings

        # Refused at start in every process (web, worker, beat, commands), not only by manage.py check.
        if errors := lock_settings():
            raise ImproperlyConfigured("; ".join(f"{error.id}: {error.msg}" for error in errors))
