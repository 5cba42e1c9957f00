"""Every page is sent a strict Content-Security-Policy: scripts and styles from the shop itself only."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PAGES = ["/", "/products/MUG/", "/cart/", "/accounts/login/", "/admin/login/", "/api/docs/", "/no-such-page/"]


def directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


@pytest.mark.parametrize("path", PAGES)
def test_pages_forbid_inline_and_foreign_scripts_and_styles(make_variant, path):
    make_variant(sku="MUG", stock=1)
    policy = directives(Client().get(path))

    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"] and policy["form-action"] == ["'self'"]


def test_the_api_docs_load_their_script_from_a_url_not_inline(admin_client):
    page = Client().get("/api/docs/").content.decode()
    assert "<script>" not in page and "<style>" not in page
    script = Client().get("/api/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()
