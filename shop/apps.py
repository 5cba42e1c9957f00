from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"
    verbose_name = "Catalog"

    def ready(self):
        from shop import checks  # noqa: F401  (registers them)
