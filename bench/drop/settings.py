"""The settings of the drop bench's gunicorn: production's, with ``bench.http_urls`` as the URLconf, so the
plain Django checkout (``bench.http_views``) is served beside the shop by the same server and middleware."""

from config.settings_production import *  # noqa: F403

ROOT_URLCONF = "bench.http_urls"
