"""Pin the round trips of the hot path: a count, not a timing, so a regression shows up in review."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from redis.client import Redis

from orders.services import order_place

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_commands(monkeypatch):
    commands = []
    original = Redis.execute_command

    def counting(self, *args, **options):
        commands.append(args[0])
        return original(self, *args, **options)

    monkeypatch.setattr(Redis, "execute_command", counting)
    return commands


@pytest.mark.parametrize("skus", [1, 3])
def test_placing_an_order_costs_a_fixed_number_of_queries_and_redis_commands(make_product, redis_commands, skus):
    for n in range(skus):
        make_product(sku=f"SKU-{n}", stock=10)
    items = [{"sku": f"SKU-{n}", "quantity": 1} for n in range(skus)]
    redis_commands.clear()

    with CaptureQueriesContext(connection) as queries:
        order_place(email="a@example.com", items=items, idempotency_key="k")

    # Replay check outside the lock; BEGIN; replay check again inside; products; SAVEPOINT; order; lines;
    # lines with products; stocks; one guarded UPDATE per line; reservations; ledger rows; RELEASE; COMMIT.
    assert len(queries) == 13 + skus, [q["sql"][:60] for q in queries]
    # One acquire script and one release script per SKU lock, nothing else when uncontended.
    assert redis_commands == ["EVALSHA"] * (2 * skus)
