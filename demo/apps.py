from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Tooling beside the shop, kept out of its apps: the oversell experiment and the demo data
    (``seed_demo``). No shop code imports it."""

    name = "demo"
