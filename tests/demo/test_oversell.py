"""``manage.py oversell_demo`` and the experiment behind it, in real processes on the test database."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from demo.oversell import oversell_experiment_run
from inventory.models import Stock
from orders.models import Order
from shop.models import ProductVariant

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_oversell_demo_shows_the_seed_designs_overselling_and_the_service_never():
    output = run("oversell_demo", "--strategy", "all", "--workers", "6", "--stock", "10", "--pause-ms", "20")
    verdicts = {line.split()[0]: line.split()[-1] for line in output.splitlines()[2:]}

    assert verdicts == {
        "naive": "WRONG",
        "mutex": "WRONG",
        "optimistic": "correct",
        "pessimistic": "correct",
        "seed_redis_lock": "WRONG",
        "service": "correct",
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("strategy", ["naive", "seed_redis_lock"])
def test_the_seed_designs_sell_more_than_they_have_or_lose_updates(strategy):
    result = oversell_experiment_run(strategy=strategy, workers=6, stock=10, attempts=30, pause=0.02)
    assert result.oversold > 0 or result.lost_updates > 0


@pytest.mark.django_db(transaction=True)
def test_the_service_sells_exactly_its_stock():
    result = oversell_experiment_run(strategy="service", workers=8, stock=10, attempts=40, pause=0.02)
    assert (result.units_sold, result.final_stock, result.oversold, result.lost_updates) == (10, 0, 0, 0)
    assert not Stock.objects.filter(variant__sku__startswith="OVERSELL-DEMO", reserved__gt=0).exists()
    # Its orders leave the shop's data with its product: cancelled, and out of the admin's order list.
    assert not Order.objects.exists() and not ProductVariant.objects.exists()
    assert set(Order.all_objects.values_list("status", flat=True)) == {Order.Status.CANCELLED}
    assert Order.all_objects.count() == 10


@pytest.mark.parametrize(
    "args",
    [["--workers", "0"], ["--stock", "-5"], ["--strategy", "bogus"], ["--attempts", "x"], ["--pause-ms", "9999"]],
)
def test_oversell_demo_refuses_bad_arguments(args):
    with pytest.raises(CommandError):
        run("oversell_demo", *args)
