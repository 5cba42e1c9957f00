"""The production server's settings (config/gunicorn.conf.py), as gunicorn itself reads them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).with_name("gunicorn")


def gunicorn_settings(**env) -> dict[str, str]:
    shown = subprocess.run(
        [GUNICORN, "--config", "config/gunicorn.conf.py", "--print-config", "config.wsgi"],
        cwd=ROOT,
        env={key: value for key, value in os.environ.items() if not key.startswith("GUNICORN_")} | env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    settings = {}
    for line in shown.splitlines():
        name, _, value = line.partition("=")
        settings[name.strip()] = value.strip()
    return settings


def test_the_default_is_two_workers_per_core_of_four_threads():
    settings = gunicorn_settings()
    assert settings["workers"] == str(2 * os.cpu_count())
    assert (settings["threads"], settings["worker_class"]) == ("4", "gthread")
    assert settings["bind"] == "['0.0.0.0:8000']"


@pytest.mark.parametrize(("threads", "worker_class"), [("1", "sync"), ("8", "gthread")])
def test_workers_threads_and_address_come_from_the_environment(threads, worker_class):
    settings = gunicorn_settings(GUNICORN_WORKERS="3", GUNICORN_THREADS=threads, GUNICORN_BIND="127.0.0.1:9001")
    assert (settings["workers"], settings["threads"], settings["worker_class"]) == ("3", threads, worker_class)
    assert settings["bind"] == "['127.0.0.1:9001']"
