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


@pytest.fixture
def failing_product_list(settings, monkeypatch):
    """bin/run's DEBUG on, and the product list failing with SQL in its error, as an unexpected error would."""
    from django.db import OperationalError

    from shop import apis

    def broken(*args, **kwargs):
        raise OperationalError('near "FOR": syntax error in SELECT secret_column FROM shop_productvariant')

    settings.DEBUG = True
    monkeypatch.setattr(apis.ProductListApi, "get_queryset", broken)


@pytest.mark.django_db
def test_an_unexpected_api_error_answers_the_api_shape_with_debug_on(client, failing_product_list):
    """The README promises ``server_error`` and no SQL; Django's debug page (HTML, SQL and all) broke it."""
    client.raise_request_exception = False
    for accept in ("*/*", "application/json"):
        response = client.get("/api/products/", HTTP_ACCEPT=accept)

        assert (response.status_code, response["Content-Type"]) == (500, "application/json"), response.content[:300]
        assert response.json()["code"] == "server_error"
        assert b"secret_column" not in response.content
    assert client.get("/", HTTP_ACCEPT="text/html").status_code == 200  # pages keep Django's own handling
