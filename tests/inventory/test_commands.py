import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.management import CommandError, call_command

from inventory import locks
from inventory.locks.wire import lock_key
from inventory.models import StockMovement
from tests.conftest import assert_books_balance, stock_of


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


# --- adjust_stock -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_adjust_stock_sets_and_shifts_through_the_service(make_variant, staff_user):
    mug = make_variant(sku="MUG", stock=10)

    assert "on hand 25" in run("adjust_stock", "MUG", "--set", "25", "--reason", "count", "--actor", "stan")
    assert "on hand 22" in run("adjust_stock", "MUG", "--delta", "-3", "--reason", "broken")

    assert list(StockMovement.objects.filter(kind="adjust").values_list("on_hand_delta", "actor__username")) == [
        (15, "stan"),
        (-3, None),
    ]
    assert_books_balance(mug)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args, message",
    [
        (["MUG", "--delta", "1"], "--reason"),
        (["MUG", "--set", "5", "--delta", "1", "--reason", "r"], "not allowed with"),
        (["MUG", "--reason", "r"], "one of the arguments --set --delta is required"),
        (["MUG", "--set", "five", "--reason", "r"], "invalid int value"),
        (["NOPE", "--delta", "1", "--reason", "r"], "unknown_sku"),
        (["MUG", "--set", "-1", "--reason", "r"], "invalid_quantity"),
        (["MUG", "--delta", "-11", "--reason", "r"], "below_reserved"),
        (["MUG", "--set", "3", "--reason", "r", "--expected-version", "99"], "stale_version"),
        (["MUG", "--delta", "1", "--reason", "r", "--actor", "nobody"], "No user named"),
    ],
)
def test_adjust_stock_refuses_bad_arguments_and_changes_nothing(make_variant, args, message):
    mug = make_variant(sku="MUG", stock=10)
    before = StockMovement.objects.count()
    with pytest.raises(CommandError, match=message):
        run("adjust_stock", *args)
    assert (stock_of(mug).on_hand, StockMovement.objects.count()) == (10, before)


def test_bad_arguments_exit_with_a_code_and_no_traceback():
    """From the shell: a clear message, exit 2, no traceback."""
    env = {
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": settings.SECRET_KEY,
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "adjust_stock", "MUG", "--set", "lots", "--reason", "r"],
        capture_output=True,
        text=True,
        env=env,
        cwd=settings.BASE_DIR,
    )
    assert result.returncode == 2
    assert "invalid int value: 'lots'" in result.stderr
    assert "Traceback" not in result.stderr


def _database_url():
    db = settings.DATABASES["default"]
    return f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 3306}/{db['NAME']}"


# --- reset_locks ----------------------------------------------------------------------------------


def _lock_keys():
    client = caches[settings.LOCK_CACHE_ALIAS].client
    return list(client.get_client().scan_iter(match=client.make_key(lock_key("*"))))


def test_reset_locks_clears_stale_keys_and_refuses_while_a_lock_is_held():
    redis = caches[settings.LOCK_CACHE_ALIAS].client.get_client()
    stale_queue = caches[settings.LOCK_CACHE_ALIAS].client.make_key(lock_key("MUG")) + ":queue"
    redis.rpush(stale_queue, b"1:dead-waiter")
    assert "Cleared 1 lock key(s)" in run("reset_locks")

    with locks.sku_locks(["MUG"]):
        with pytest.raises(CommandError, match="1 lock\\(s\\) held") as error:
            run("reset_locks")
        assert error.value.returncode == 1
        assert _lock_keys()
        assert "Cleared 1 lock key(s)" in run("reset_locks", "--force")
        assert not _lock_keys()
