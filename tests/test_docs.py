"""The docs a newcomer reads stay true: every setting documented, every link and file they name there,
every reason a voucher is refused, every payment provider."""

import re
from pathlib import Path

import pytest
from django.conf import settings

from vouchers.errors import VoucherInvalid

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# What the shop's processes and its two commands read from the environment.
READERS = [
    "config/settings.py",
    "config/settings_production.py",
    "config/embedded_redis.py",
    "config/celery.py",
    "config/wsgi.py",
    "manage.py",
    "demo/management/commands/seed_demo.py",
    "bin/run",
    "bin/_setup",
    "bin/test",
]
READS = [
    r"""\benv(?:\.\w+)?\(\s*["'](\w+)["']""",  # django-environ: env("X"), env.int("X", ...)
    r"""os\.environ(?:\.get|\.setdefault)?[\[(]\s*["'](\w+)["']""",
    r"\$\{?([A-Z][A-Z0-9_]*)",  # shell
]
NOT_SETTINGS = {"PATH", "PWD", "HOME"}
# The checkout's folders, every app's among them: the pages name files in them.
TOP_FOLDERS = sorted(
    path.name for path in ROOT.iterdir() if path.is_dir() and path.name[0] not in "._" and path.name != "var"
)


def test_the_configuration_page_names_every_variable_the_shop_reads():
    read = set()
    for reader in READERS:
        text = (ROOT / reader).read_text()
        for pattern in READS:
            read |= set(re.findall(pattern, text))
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text()))
    assert read - NOT_SETTINGS - documented == set()


def test_the_providers_table_has_a_row_for_each_payment_provider_naming_its_module():
    page = (ROOT / "docs" / "configuration.md").read_text()
    table = page.split("### Payment providers", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)`[^|]*\| `([\w/]+\.py)` \|", table, flags=re.MULTILINE))
    modules = {
        name: path.rpartition(".")[0].replace(".", "/") + ".py" for name, path in settings.PAYMENT_PROVIDERS.items()
    }
    assert rows == modules


def test_the_readme_stays_short_and_leaves_the_settings_to_their_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "](docs/configuration.md)" in readme


def test_the_readme_names_every_voucher_refusal_reason_in_order():
    """The README's 409 row lists ``voucher_invalid``'s reasons: the one list's, none missing or extra."""
    readme = (ROOT / "README.md").read_text()
    [listed] = re.findall(r"`voucher_invalid` \(`voucher`, `reason`: (.+?)\),", readme)
    # Each item is its reason, then perhaps what it adds: "`minimum_not_met` with the `minimum` and ...".
    assert [re.match(r"`(\w+)`", item).group(1) for item in listed.split(", ")] == list(VoucherInvalid.REASONS)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {github_anchor(heading) for heading in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)}


@pytest.mark.parametrize("page", DOCS, ids=[page.name for page in DOCS])
def test_every_link_and_file_a_page_names_is_there(page):
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    # Files named in backticks: `orders/services/placing.py`, `tests/faults/`, `bin/run` (not var/'s own files).
    for name in re.findall(rf"`((?:{'|'.join(TOP_FOLDERS)})/[\w./-]*)`", text):
        if not (ROOT / name).exists():
            broken.append(name)
    assert broken == []
