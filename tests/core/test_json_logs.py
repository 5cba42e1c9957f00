"""LOG_FORMAT=json: one JSON object per line, with the request id, and the order and SKU a line is about."""

import io
import json
import logging

import pytest
from django.conf import settings
from pythonjsonlogger.json import JsonFormatter

from core.logcontext import LogContextFilter
from orders.services import order_place
from tests.conftest import client_for, pay

pytestmark = pytest.mark.django_db


@pytest.fixture
def json_lines():
    """The console handler settings.LOGGING builds with LOG_FORMAT=json, writing to a buffer instead."""
    options = {key: value for key, value in settings.LOGGING["formatters"]["json"].items() if key != "()"}
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(**options))
    handler.addFilter(LogContextFilter())
    loggers = [logging.getLogger(name) for name in ("orders", "payments", "inventory")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_each_line_is_json_with_the_request_id_and_the_order_and_sku_it_is_about(
    json_lines, make_variant, provider, shop_staff
):
    make_variant(sku="MUG", stock=5, price="2.50")
    order = pay(order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k"))
    staff = client_for(shop_staff)

    response = staff.post(
        f"/api/orders/{order.number}/refund/", {"restock": True}, format="json", HTTP_X_REQUEST_ID="req-42"
    )

    assert response.status_code == 200 and response["X-Request-ID"] == "req-42"
    lines = [line for line in json_lines() if line["request_id"] == "req-42"]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    refunded = next(line for line in lines if line["message"] == f"order {order.number} refunded in full")
    assert (refunded["level"], refunded["logger"]) == ("INFO", "payments.services.refunds")
    assert (refunded["order"], refunded["sku"]) == (order.number, "MUG")  # written inside MUG's stock section
    restocked = next(line for line in lines if line["logger"] == "inventory.services")
    assert "refund_restock" in restocked["message"]


def test_a_request_id_that_is_not_a_plain_token_is_replaced(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="<script> and much more than sixty-four characters of it" * 2)
    assert len(response["X-Request-ID"]) == 32 and response["X-Request-ID"].isalnum()
