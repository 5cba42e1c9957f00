"""Joining and waiting touch Redis only: no database query, no session written, for a guest's page and the
API's reads (a crowd of waiting buyers never reaches the database)."""

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from drops import passes
from orders.services import drop_line_pass

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_guest_joins_and_waits_without_a_query(client, make_drop):
    drop = make_drop(units=3)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    with CaptureQueriesContext(connection) as queries:
        form = client.get(f"/drops/{drop.pk}/")
        joined = client.post(f"/drops/{drop.pk}/", {"sku": variant.sku, "email": "ann@example.com", "quantity": "1"})
        waiting = client.get(f"/drops/{drop.pk}/")
        news = client.get(f"/api/drops/{drop.pk}/news/")
        token = client.cookies[passes.cookie_name(drop.pk)].value
        place = client.get(f"/api/drops/{drop.pk}/line/", HTTP_X_DROP_PASS=token)
    assert (form.status_code, joined.status_code, waiting.status_code) == (200, 302, 200)
    assert news.status_code == 200 and place.status_code == 200
    assert b"#1" in waiting.content
    assert [q["sql"] for q in queries.captured_queries] == []
    assert settings.SESSION_COOKIE_NAME not in client.cookies  # no session was started or written


def test_a_logged_in_join_reads_its_session_once_and_waits_without_a_query(client, customer, make_drop):
    drop = make_drop(units=3)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    client.force_login(customer)
    with CaptureQueriesContext(connection) as queries:
        client.post(f"/drops/{drop.pk}/", {"sku": variant.sku, "quantity": "1"})
    assert len(queries.captured_queries) == 1  # the session, for the account: the place is the account's
    with CaptureQueriesContext(connection) as queries:
        waiting = client.get(f"/drops/{drop.pk}/")
    assert b"#1" in waiting.content and queries.captured_queries == []
