"""/healthz and /readyz for load balancers: alive without touching a dependency; ready only when the
database answers, every migration is applied and, unless the shop sells through a Redis outage under
the rows' locks, the lock service's Redis takes a write."""

import html

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert (response.status_code, response.content) == (200, b"ok\n")
    assert "no-cache" in response["Cache-Control"]


def ready(client):
    response = client.get("/readyz", HTTP_ACCEPT="application/json")
    return response.status_code, response.json()


def test_readyz_is_ready_on_mariadb_and_redis_with_every_migration_applied(client, settings):
    settings.LOCK_DB_FALLBACK = False
    status, checks = ready(client)
    assert status == 200, checks
    assert {"Database(alias='default')", "Cache(alias='locks')", "MigrationsApplied()"} <= set(checks), checks
    assert set(checks.values()) == {"OK"}


def test_readyz_is_not_ready_with_a_migration_not_applied(client, monkeypatch):
    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [("orders", "0099_next")])
    status, checks = ready(client)
    assert status == 500 and "1 migration(s) not applied" in checks["MigrationsApplied()"]


def redis_unreachable(settings):
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "LOCATION": "redis://127.0.0.1:1/0"},  # nothing listens there
    }


def test_without_the_fallback_readyz_is_not_ready_when_the_lock_service_is_unreachable(client, settings):
    settings.LOCK_DB_FALLBACK = False
    redis_unreachable(settings)
    status, checks = ready(client)
    assert status == 500 and checks["Cache(alias='locks')"] != "OK"
    assert checks["Database(alias='default')"] == "OK"


def test_with_the_fallback_a_host_stays_ready_while_the_lock_service_is_unreachable(client, settings):
    """It sells under the stock rows' locks meanwhile (tests/faults/test_redis_outage.py)."""
    redis_unreachable(settings)
    status, checks = ready(client)
    assert status == 200, checks
    assert set(checks) == {"Database(alias='default')", "MigrationsApplied()"}


FORMATS = ["text", "html", "atom", "rss", "openmetrics"]


def test_readyz_names_the_failing_dependency_but_not_its_host_or_user(client, settings, monkeypatch, caplog):
    """The database refuses the login: anonymous callers learn which check failed, the log says why."""
    settings.LOCK_DB_FALLBACK = False
    monkeypatch.setitem(connections.settings["default"], "PASSWORD", "not-the-password")
    database = connections.settings["default"]
    answers = [str(ready(client)[1]), *(client.get(f"/readyz?format={kind}").content.decode() for kind in FORMATS)]
    for text in map(html.unescape, answers):
        assert "Database" in text, text
        told = [part for part in (f"'{database['USER']}'@", f"'{database['HOST']}'", "Access denied") if part in text]
        assert not told, text
    assert "Access denied" in caplog.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_probes_answer_plain_http_under_the_https_redirect(client, settings, path):
    """A load balancer (or Prometheus) probes the app server over plain HTTP: it gets the answer, not a 301."""
    settings.SECURE_SSL_REDIRECT = True
    settings.METRICS_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    response = client.get(path, REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200, (response.status_code, response.get("Location"))
    assert client.get("/cart/").status_code == 301  # every other page still goes to HTTPS
