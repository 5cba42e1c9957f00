from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class PaymentsConfig(AppConfig):
    name = "payments"

    def ready(self):
        from payments.providers import payment_provider

        # Refused at start in every process (web, worker, beat, commands), as config.settings_production does.
        if settings.PRODUCTION and (problems := payment_provider().production_problems(settings)):
            raise ImproperlyConfigured("; ".join(problems))
