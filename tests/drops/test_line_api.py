"""The line's API: join (idempotent), read the place with the pass, the refusals, the held order's checkout."""

import pytest

from drops import passes
from orders.models import Order
from orders.services import drop_line_pass
from tests.conftest import client_for, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_join_read_and_check_out_by_api(make_drop, customer):
    drop = make_drop(units=2)
    variant = drop.entries.get().variant
    api = client_for(customer)
    drop_line_pass(drop=drop)
    joined = api.post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json")
    assert joined.status_code == 201, joined.json()
    token = joined.json()["pass_token"]
    assert joined.json()["state"] == "waiting" and joined["Retry-After"]
    again = api.post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json")
    assert again.status_code == 200 and again.json()["ticket"] == joined.json()["ticket"]
    refused = api.post(
        "/api/orders/", {"items": [{"sku": variant.sku, "quantity": 1}]}, format="json", HTTP_IDEMPOTENCY_KEY="x"
    )
    assert refused.status_code == 403
    assert refused.json()["code"] == "not_admitted" and refused.json()["line"] == f"/api/drops/{drop.pk}/line/"
    drop_line_pass(drop=drop)
    place = api.get(f"/api/drops/{drop.pk}/line/", HTTP_X_DROP_PASS=token).json()
    assert place["state"] == "admitted" and place["order"]
    anyone = client_for(customer.__class__.objects.create_user("eve", "eve@example.com", "pw-eve-12345"))
    assert anyone.post(f"/api/orders/{place['order']}/checkout/", {}, format="json").status_code == 404
    checked_out = api.post(f"/api/orders/{place['order']}/checkout/", {}, format="json", HTTP_X_DROP_PASS=token)
    assert checked_out.status_code == 200, checked_out.json()
    assert checked_out.json()["status"] == "awaiting_payment"
    assert Order.objects.get(number=place["order"]).status == Order.Status.AWAITING_PAYMENT
    assert stock_of(variant).reserved == 1


@pytest.mark.parametrize(
    "body", [{"sku": "NOPE"}, {"sku": 5}, {"quantity": 1}, {"sku": "X", "quantity": "1"}, {"sku": "X", "quantity": 0}]
)
def test_bad_joins_are_refused_with_a_code(make_drop, customer, body):
    drop = make_drop(units=2)
    drop_line_pass(drop=drop)
    answer = client_for(customer).post(f"/api/drops/{drop.pk}/line/", body, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_input"


def test_a_pass_for_another_drop_or_altered_is_refused(make_drop, customer, api_client):
    drop = make_drop(units=2)
    drop_line_pass(drop=drop)
    other = passes.pass_issue(drop_id=drop.pk + 1, ticket=1)
    for token in (other, passes.pass_issue(drop_id=drop.pk, ticket=1) + "x", ""):
        answer = api_client.get(f"/api/drops/{drop.pk}/line/", HTTP_X_DROP_PASS=token)
        assert answer.status_code == 403 and answer.json()["code"] == "pass_invalid"


def test_a_line_not_open_takes_no_one(make_drop, customer):
    drop = make_drop(units=2, opens_in=3600)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    answer = client_for(customer).post(f"/api/drops/{drop.pk}/line/", {"sku": variant.sku}, format="json")
    assert answer.status_code == 409 and answer.json()["code"] == "line_closed"
    assert answer.json()["reason"] == "not_open"


def test_news_is_one_answer_for_everyone(make_drop, api_client):
    drop = make_drop(units=2)
    drop_line_pass(drop=drop)
    news = api_client.get(f"/api/drops/{drop.pk}/news/")
    assert news.status_code == 200 and news.json()["state"] == "open"
    assert [v["units"] for v in news.json()["variants"].values()] == ["few"]
