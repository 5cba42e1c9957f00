from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared base under every app: abstract models, errors, the clock, database helpers, checks.

    It imports no app of ours (``.importlinter``), so every app can build on it.
    """

    name = "core"
    verbose_name = "Core"

    def ready(self):
        from core import checks, tokens  # noqa: F401  (registers the checks and the token revocation)
