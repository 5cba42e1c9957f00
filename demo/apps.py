from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Demonstrations that run the shop's designs beside the ones it rejects; no shop code imports it."""

    name = "demo"
