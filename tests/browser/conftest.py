"""Real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright against pytest-django's live server."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from tests.processes import process_env
from tests.test_celery_worker import celery, forget_every_task

# Playwright's sync API runs an event loop in this thread; the ORM calls our tests make are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server, transactional_db, settings):
    """A browser tab on the live server. Any page it shows that breaks the Content-Security-Policy (an inline
    script or style, a foreign source) fails the test: Chromium reports each refusal on the console."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    refused = []
    page.on("console", lambda message: "Content Security Policy" in message.text and refused.append(message.text))
    yield page
    context.close()
    assert not refused, refused


def screenshot(page, name: str) -> None:
    """A full-page screenshot in artifacts/screenshots/ (git-ignored) for a person to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def payments_worker(live_server, settings, tmp_path):
    """A real Celery worker: it sends the local provider's webhooks to the live server and applies them."""
    settings.LOCAL_PAYMENTS_WEBHOOK_URL = f"{live_server.url}/payments/local/webhook/"
    forget_every_task()
    with celery("worker", process_env(), tmp_path / "worker.log", "--concurrency=2"):
        yield
    forget_every_task()
