"""A JSON body nested deeper than the parser can follow is a 400 ``malformed_json``, never a 500.

The endpoints are those the API schema says take a request body, so a new one is covered as it comes.
"""

import re

import pytest
from drf_spectacular.generators import SchemaGenerator

from config.error_views import API_PREFIX
from fulfilment.models import ReturnRequest
from orders.services import order_place
from shipping.services import address_book_add
from tests.conftest import ADDRESS_DE, client_for

pytestmark = pytest.mark.django_db

NESTED = "[" * 100_000 + "]" * 100_000


def _operations_with_a_body() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted(
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    )


def test_the_schema_lists_the_json_endpoints():
    assert ("POST", f"{API_PREFIX}orders/") in _operations_with_a_body()
    assert ("POST", f"{API_PREFIX}auth/token/") in _operations_with_a_body()


@pytest.mark.parametrize(("method", "path"), _operations_with_a_body())
def test_deeply_nested_json_is_refused_as_malformed(method, path, shop_staff, make_variant):
    """As shop staff, owning the order: every permission passes, so the body is what gets read."""
    make_variant(sku="MUG", stock=5)
    order = order_place(customer=shop_staff, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")
    ids = {
        "sku": "MUG",
        "number": order.number,
        "id": ReturnRequest.objects.create(order=order).pk,
        "address_id": address_book_add(user=shop_staff, address=ADDRESS_DE).pk,
    }
    url = re.sub(r"\{(\w+)\}", lambda name: str(ids[name.group(1)]), path)

    response = client_for(shop_staff).generic(
        method, url, NESTED, content_type="application/json", HTTP_IDEMPOTENCY_KEY="nested"
    )

    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "malformed_json"
