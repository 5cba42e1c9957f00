from django.apps import AppConfig


class DropsConfig(AppConfig):
    name = "drops"
    verbose_name = "Drops"
