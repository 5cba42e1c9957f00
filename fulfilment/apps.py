from django.apps import AppConfig


class FulfilmentConfig(AppConfig):
    name = "fulfilment"
