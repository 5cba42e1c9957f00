from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Tooling beside the shop, kept out of its apps: the oversell experiment, the demo data (``seed_demo``)
    and the benchmarks' order history (``seed_history``). No shop code imports it."""

    name = "demo"
