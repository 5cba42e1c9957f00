"""Production installs only what production runs: the test and tool packages live in requirements-dev.txt,
which bin/test installs on top of the runtime; every package is pinned."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV_ONLY = {"pytest", "pytest-django", "playwright", "ruff", "import-linter", "aiosmtpd", "schemathesis"}
PIN = re.compile(r"^([A-Za-z0-9_.\[\]-]+)==[0-9][^\s]*(\s+#.*)?$")


def packages(name: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("-r "):
            continue
        match = PIN.match(line)
        assert match, f"{name}: not pinned with ==: {line!r}"
        found[match.group(1).split("[")[0].lower()] = line
    return found


def test_the_runtime_holds_no_test_or_tool_package_and_the_dev_file_holds_them_all():
    runtime, dev = packages("requirements.txt"), packages("requirements-dev.txt")
    assert not DEV_ONLY & set(runtime), sorted(DEV_ONLY & set(runtime))
    assert DEV_ONLY <= set(dev)
    assert not set(runtime) & set(dev)  # each package pinned in one place
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert {"django", "djangorestframework", "django-redis", "mysqlclient", "celery", "gunicorn"} <= set(runtime)


def test_bin_test_installs_the_dev_requirements_and_bin_run_only_the_runtime():
    assert "requirements-dev.txt" in (ROOT / "bin" / "test").read_text()
    setup = (ROOT / "bin" / "_setup").read_text()
    assert "-r requirements.txt" in setup and "requirements-dev.txt" not in setup
