"""/healthz and /readyz for load balancers: alive without touching a dependency; ready only when the
database answers, every migration is applied and, unless the shop sells through a Redis outage under
the rows' locks, the lock service's Redis takes a write."""

import pytest
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
