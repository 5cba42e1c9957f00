"""Shared by the fault scenarios: each one ends by checking the books."""

import time
from contextlib import contextmanager

import MySQLdb
import pytest
from django.conf import settings
from django.db.models import Sum

from inventory.models import Reservation, Stock, StockMovement
from tests.conftest import assert_books_balance, token_for
from tests.processes import http, wait_for


def assert_books(*variants) -> None:
    """Counters equal the ledger, reserved equals the active reservations, nothing negative, nothing oversold."""
    assert_books_balance(*variants)
    for variant in variants:
        received = StockMovement.objects.filter(
            stock__variant=variant, kind__in=[StockMovement.Kind.RESTOCK, StockMovement.Kind.ADJUST]
        ).aggregate(units=Sum("on_hand_delta"))["units"]
        taken = Reservation.objects.filter(
            variant=variant, state__in=[Reservation.State.ACTIVE, Reservation.State.COMMITTED]
        ).aggregate(units=Sum("quantity"))["units"]
        assert (taken or 0) <= received, f"{variant.sku}: {taken} units sold or held, only {received} received"


@pytest.fixture
def private_redis_settings(settings, tmp_path):
    """Point this process's caches (locks included) at a private redis-server a test may crash."""
    from tests.processes import RedisServer

    with RedisServer(tmp_path) as redis:
        settings.CACHES = {alias: {**config, "LOCATION": redis.url} for alias, config in settings.CACHES.items()}
        yield redis


@pytest.fixture
def token(django_user_model):
    user = django_user_model.objects.create_user(username="buyer", password="pw-buyer-123")
    return token_for(user)


def mysql_session():
    db = settings.DATABASES["default"]
    return MySQLdb.connect(
        host=db["HOST"], port=int(db["PORT"] or 3306), user=db["USER"], password=db["PASSWORD"], database=db["NAME"]
    )


@contextmanager
def row_locked(stock: Stock):
    """Hold the stock row's lock from another session, as a slow transaction would."""
    session = mysql_session()
    session.cursor().execute("BEGIN")
    session.cursor().execute("SELECT id FROM inventory_stock WHERE id = %s FOR UPDATE", [stock.pk])
    try:
        yield session
    finally:
        session.rollback()
        session.close()


def waiting_order_update(session) -> tuple[int, int]:
    """The connection id and client port of the order transaction waiting on our row lock."""
    found = []

    def waiting():
        cursor = session.cursor()
        cursor.execute(
            "SELECT id, host FROM information_schema.processlist WHERE info LIKE 'UPDATE `inventory_stock`%%'"
        )
        found[:] = cursor.fetchall()
        return bool(found)

    wait_for(waiting, timeout=30, what="the order's UPDATE to wait on the row lock")
    connection_id, host = found[0]
    return connection_id, int(host.rsplit(":", 1)[1])


def buyer_over_http(url, token, name, pause=0.0):
    """Buy one unit at a time until sold out, ``pause`` seconds apart, retrying a 503 with the same key as
    a client should.

    Returns the order number told per key, the key refused for want of stock, and each 503's code and time.
    """
    told, retried, tries = {}, [], 2000
    for _ in range(tries):
        key = f"{name}-{len(told)}"
        body = {"items": [{"sku": "MUG", "quantity": 1}]}
        status, body, _ = http("POST", f"{url}/api/orders/", token=token, body=body, key=key)
        if status == 201:
            told[key] = body["number"]
            time.sleep(pause)
        elif status == 503:
            retried.append((body["code"], time.time()))
            time.sleep(0.05)
        else:
            assert (status, body["code"]) == (409, "insufficient_stock"), body
            return told, key, retried
    raise AssertionError(f"{name} was still buying after {tries} requests")
