"""Debug error pages show settings; none that can carry a credential may show it."""

import sys

import pytest
from django.test import RequestFactory
from django.views.debug import ExceptionReporter

SECRET = "s3cret-in-a-url"
STORE = f"redis://:{SECRET}@redis.internal:6379/0"


@pytest.fixture
def stores_with_passwords(settings):
    settings.DEBUG = True
    settings.REDIS_URL = STORE
    settings.CELERY_BROKER_URL = f"amqp://shop:{SECRET}@rabbit.internal:5672//"
    settings.CELERY_RESULT_BACKEND = STORE
    settings.CACHES = {alias: cache | {"LOCATION": STORE} for alias, cache in settings.CACHES.items()}
    settings.SOME_SERVICE_DSN = f"https://user:{SECRET}@sentry.internal/1"


def test_the_debug_error_page_masks_every_url_that_carries_a_password(stores_with_passwords):
    request = RequestFactory().get("/boom/")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        page = ExceptionReporter(request, *sys.exc_info()).get_traceback_html()

    assert "boom" in page and "REDIS_URL" in page and "CELERY_BROKER_URL" in page  # the settings are listed
    assert SECRET not in page
