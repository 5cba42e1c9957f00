"""Lock settings under which a served buyer could be told something false are refused at start."""

import subprocess
import sys

from django.test import override_settings

from inventory.checks import lock_settings
from tests.processes import ROOT, process_env


def test_the_default_lock_settings_pass():
    assert lock_settings() == []


@override_settings(LOCK_TTL_SECONDS=10, LOCK_WAIT_SOCKET_TIMEOUT_SECONDS=5)
def test_a_waiting_socket_timeout_below_the_ttl_is_refused():
    assert [error.id for error in lock_settings()] == ["inventory.E001"]


@override_settings(LOCK_TTL_SECONDS=10, LOCK_WAIT_SECONDS=10)
def test_a_lock_wait_as_long_as_the_ttl_is_refused():
    assert [error.id for error in lock_settings()] == ["inventory.E002"]


def test_a_process_started_with_such_settings_refuses_to_start():
    env = process_env(LOCK_TTL_SECONDS=10, LOCK_WAIT_SOCKET_TIMEOUT_SECONDS=5, LOCK_WAIT_SECONDS=12)
    started = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert started.returncode != 0
    assert "inventory.E001" in started.stderr and "inventory.E002" in started.stderr
