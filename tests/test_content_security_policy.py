"""Every page is sent a strict Content-Security-Policy: scripts and styles from the shop itself only."""

import json
import subprocess

import pytest
from django.test import Client

from tests.processes import BIN, ROOT, process_env

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


def image_sources(**env: str) -> list[str]:
    """``img-src`` as config.settings builds it in a process started with ``env``."""
    show = "from django.conf import settings; print(json.dumps(settings.CONTENT_SECURITY_POLICY['DIRECTIVES']))"
    run = subprocess.run(
        [BIN / "python", "-c", f"import json, django; django.setup(); {show}"],
        cwd=ROOT,
        env=process_env(DJANGO_SETTINGS_MODULE="config.settings", **env),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)["img-src"]


S3 = {"MEDIA_STORAGE": "s3", "MEDIA_S3_BUCKET": "shop-images"}


@pytest.mark.parametrize(
    "env, origins",
    [
        ({}, []),
        ({"MEDIA_URL": "https://cdn.example.net/media/"}, ["https://cdn.example.net"]),
        (S3, ["https://shop-images.s3.amazonaws.com"]),
        (
            {**S3, "MEDIA_S3_REGION": "eu-central-1"},
            ["https://shop-images.s3.amazonaws.com", "https://shop-images.s3.eu-central-1.amazonaws.com"],
        ),
        ({**S3, "MEDIA_S3_ENDPOINT_URL": "http://127.0.0.1:9000"}, ["http://127.0.0.1:9000"]),
        (
            {**S3, "MEDIA_S3_ENDPOINT_URL": "https://s3.example.net"},
            ["https://s3.example.net", "https://shop-images.s3.example.net"],
        ),
        ({**S3, "MEDIA_S3_CUSTOM_DOMAIN": "images.example.net"}, ["https://images.example.net"]),
    ],
)
def test_images_served_from_another_origin_are_allowed_by_img_src(env, origins):
    """Product images on S3 (or a CDN) are the shop's own: its policy lets the pages show them, and only them."""
    assert image_sources(**env) == ["'self'", "data:", *origins]
