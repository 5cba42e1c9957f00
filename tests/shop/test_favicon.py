"""The shop's icon: at /favicon.ico, where browsers and probes ask for it, and named by every page."""

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_the_shops_icon(client):
    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon" and "max-age" in response["Cache-Control"]
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert body == open(finders.find("shop/favicon.ico"), "rb").read()


def test_every_page_names_the_icon_from_its_own_origin(client):
    page = client.get("/").content.decode()

    assert '<link rel="icon" href="/static/shop/favicon.ico">' in page  # 'self' under the CSP's img-src
    assert client.get("/static/shop/favicon.ico").status_code == 200
