"""Who may call what: every API endpoint, every method, as four callers, against one explicit table.

The endpoints are read from the URL resolver, so a new one without a row here fails
``test_every_api_endpoint_has_an_expectation``; a new method on an old one fails its row.
"""

import itertools
import json

import pytest
import yaml
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from config.error_views import API_PREFIX
from fulfilment.models import ReturnRequest
from orders.models import Order
from orders.services import order_place
from shipping.services import address_book_add
from tests.conftest import ADDRESS_DE, ADDRESS_US, client_for

METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"]
ROLES = ["anonymous", "stranger", "owner", "staff"]  # stranger: a customer who does not own the order

OK = (200, None)
CREATED = (201, None)
NO_CONTENT = (204, None)
NOT_AUTHENTICATED = (401, "not_authenticated")
PERMISSION_DENIED = (403, "permission_denied")
NOT_FOUND = (404, "not_found")  # another's order is the same answer as no order: its existence stays hidden
NOT_ALLOWED = (405, "method_not_allowed")
NOT_ALLOWED_HTML = (405, None)  # Swagger UI is an HTML page and answers in HTML


def each(expected):
    return dict.fromkeys(ROLES, expected)


def by_role(anonymous, stranger, owner, staff):
    return dict(zip(ROLES, (anonymous, stranger, owner, staff), strict=True))


CUSTOMERS = by_role(NOT_AUTHENTICATED, OK, OK, OK)
OWNER_ONLY = by_role(NOT_AUTHENTICATED, NOT_FOUND, OK, NOT_FOUND)
CUSTOMERS_REFUSED = by_role(NOT_AUTHENTICATED, NOT_ALLOWED, NOT_ALLOWED, NOT_ALLOWED)
STAFF_ONLY = by_role(NOT_AUTHENTICATED, PERMISSION_DENIED, PERMISSION_DENIED, OK)
STAFF_REFUSED = by_role(NOT_AUTHENTICATED, PERMISSION_DENIED, PERMISSION_DENIED, NOT_ALLOWED)

# Per endpoint: the answer per method and caller; "other" covers every method not named.
EXPECTED = {
    "api:product-list": {"GET": each(OK), "HEAD": each(OK), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:product-detail": {
        "GET": each(OK),
        "HEAD": each(OK),
        "OPTIONS": each(OK),
        "PATCH": STAFF_ONLY,
        "other": each(NOT_ALLOWED),
    },
    "api:order-list": {
        "GET": CUSTOMERS,
        "HEAD": CUSTOMERS,
        "OPTIONS": CUSTOMERS,
        "POST": by_role(NOT_AUTHENTICATED, CREATED, CREATED, CREATED),
        "other": CUSTOMERS_REFUSED,
    },
    # A quote for the cart is each customer's own business: nothing is placed.
    "api:checkout-quote": {"POST": CUSTOMERS, "OPTIONS": CUSTOMERS, "other": CUSTOMERS_REFUSED},
    "api:order-detail": {"GET": OWNER_ONLY, "HEAD": OWNER_ONLY, "OPTIONS": CUSTOMERS, "other": CUSTOMERS_REFUSED},
    "api:order-pay": {"POST": OWNER_ONLY, "OPTIONS": CUSTOMERS, "other": CUSTOMERS_REFUSED},
    "api:order-cancel": {"POST": OWNER_ONLY, "OPTIONS": CUSTOMERS, "other": CUSTOMERS_REFUSED},
    # Staff with refund_order refund any customer's order; this one is not paid yet.
    "api:order-refund": {
        "POST": by_role(NOT_AUTHENTICATED, PERMISSION_DENIED, PERMISSION_DENIED, (409, "order_not_refundable")),
        "OPTIONS": STAFF_ONLY,
        "other": STAFF_REFUSED,
    },
    # Staff with ship_order ship any customer's paid order; this one is not paid yet.
    "api:order-ship": {
        "POST": by_role(NOT_AUTHENTICATED, PERMISSION_DENIED, PERMISSION_DENIED, (409, "order_not_shippable")),
        "OPTIONS": STAFF_ONLY,
        "other": STAFF_REFUSED,
    },
    # The owner asks to return units of their own order; this one shipped nothing yet.
    "api:order-returns": {
        "POST": by_role(NOT_AUTHENTICATED, NOT_FOUND, (409, "return_not_allowed"), NOT_FOUND),
        "OPTIONS": CUSTOMERS,
        "other": CUSTOMERS_REFUSED,
    },
    # Staff with refund_order decide any return; accepting this one refunds an order not paid yet.
    "api:return-accept": {
        "POST": by_role(NOT_AUTHENTICATED, PERMISSION_DENIED, PERMISSION_DENIED, (409, "order_not_refundable")),
        "OPTIONS": STAFF_ONLY,
        "other": STAFF_REFUSED,
    },
    "api:return-refuse": {"POST": STAFF_ONLY, "OPTIONS": STAFF_ONLY, "other": STAFF_REFUSED},
    "api:stock-detail": {
        "GET": STAFF_ONLY,
        "HEAD": STAFF_ONLY,
        "OPTIONS": STAFF_ONLY,
        "PATCH": STAFF_ONLY,
        "other": STAFF_REFUSED,
    },
    "api:stock-movements": {"GET": STAFF_ONLY, "HEAD": STAFF_ONLY, "OPTIONS": STAFF_ONLY, "other": STAFF_REFUSED},
    # Signing up, verifying and resetting need no account (and ignore a token sent).
    "api:account-signup": {"POST": each((202, None)), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:account-verify": {
        "POST": each((400, "verification_invalid")),
        "OPTIONS": each(OK),
        "other": each(NOT_ALLOWED),
    },
    "api:account-verify-resend": {"POST": each((202, None)), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:account-password-reset": {"POST": each((202, None)), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:account-password-reset-confirm": {
        "POST": each((400, "invalid_input")),
        "OPTIONS": each(OK),
        "other": each(NOT_ALLOWED),
    },
    "api:account-me": {"GET": CUSTOMERS, "HEAD": CUSTOMERS, "OPTIONS": CUSTOMERS, "other": CUSTOMERS_REFUSED},
    "api:account-addresses": {
        "GET": CUSTOMERS,
        "HEAD": CUSTOMERS,
        "OPTIONS": CUSTOMERS,
        "POST": by_role(NOT_AUTHENTICATED, CREATED, CREATED, CREATED),
        "other": CUSTOMERS_REFUSED,
    },
    # Each customer's own addresses; another's is as good as missing.
    "api:account-address": {
        "GET": OWNER_ONLY,
        "HEAD": OWNER_ONLY,
        "PATCH": OWNER_ONLY,
        "DELETE": by_role(NOT_AUTHENTICATED, NOT_FOUND, NO_CONTENT, NOT_FOUND),
        "OPTIONS": CUSTOMERS,
        "other": CUSTOMERS_REFUSED,
    },
    # Anyone may try to log in (with the owner's credentials here).
    "api:auth-token": {"POST": each(OK), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    # A caller revokes the token it sends.
    "api:auth-token-revoke": {
        "POST": by_role(NOT_AUTHENTICATED, NO_CONTENT, NO_CONTENT, NO_CONTENT),
        "OPTIONS": CUSTOMERS,
        "other": CUSTOMERS_REFUSED,
    },
    # A drop's line: anyone reads the shared news; joining needs an account (there is no line with this id:
    # no news, so it takes no one); reading a place or checking out a hold needs the place's pass.
    "api:drop-news": {"GET": each(OK), "HEAD": each(OK), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:drop-line": {
        "GET": each((403, "pass_invalid")),
        "HEAD": each((403, None)),
        "OPTIONS": CUSTOMERS,
        "POST": by_role(NOT_AUTHENTICATED, (409, "line_closed"), (409, "line_closed"), (409, "line_closed")),
        "other": CUSTOMERS_REFUSED,
    },
    "api:order-hold-checkout": {"POST": each(NOT_FOUND), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:schema": {"GET": each(OK), "HEAD": each(OK), "OPTIONS": each(OK), "other": each(NOT_ALLOWED)},
    "api:docs": {"GET": each(OK), "HEAD": each(OK), "other": each(NOT_ALLOWED_HTML)},
}


def api_endpoints() -> dict[str, list[str]]:
    """Every URL pattern under /api/ in the whole URLconf, as ``namespace:name`` -> its URL arguments."""
    found = {}

    def walk(patterns, prefix, namespace):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(
                    pattern.url_patterns, route, f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
                )
            elif isinstance(pattern, URLPattern) and ("/" + route).startswith(API_PREFIX):
                assert pattern.name, f"/{route} has no name, so it cannot have an expectation"
                found[namespace + pattern.name] = list(pattern.pattern.converters)

    walk(get_resolver().url_patterns, "", "")
    return found


ENDPOINTS = api_endpoints()


def test_every_api_endpoint_has_an_expectation():
    assert set(ENDPOINTS) == set(EXPECTED)


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """Three users per case: the production hasher's deliberate slowness would cost minutes here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(make_variant, customer, django_user_model, shop_staff):
    """One product, one order of the owner's, and a client per caller."""
    make_variant(sku="MUG", stock=50)
    order = order_place(
        customer=customer, email="alice@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="world"
    )
    stranger = django_user_model.objects.create_user(username="bob", password="pw-bob-123")
    clients = {
        "anonymous": APIClient(),
        "stranger": client_for(stranger),
        "owner": client_for(customer),
        "staff": client_for(shop_staff),
    }
    returned = ReturnRequest.objects.create(order=order)  # as if asked: what staff decide
    address = address_book_add(user=customer, address=ADDRESS_DE)
    args = {"sku": "MUG", "number": order.number, "pk": returned.pk, "address_id": address.pk}
    return {"order": order, "clients": clients, "args": args}


BODIES = {
    "api:product-detail": {"max_per_customer": 5},
    "api:order-list": {"items": [{"sku": "MUG", "quantity": 1}]},
    "api:checkout-quote": {"items": [{"sku": "MUG", "quantity": 1}]},
    "api:order-pay": {},
    "api:drop-line": {"sku": "MUG"},
    "api:order-hold-checkout": {},
    "api:order-refund": {"restock": True},
    "api:order-ship": {"carrier": "DHL", "tracking_number": "00340434161094015902"},
    "api:order-returns": {"lines": [{"sku": "MUG", "quantity": 1}], "reason": "too big"},
    "api:return-refuse": {"answer": "Not ours to take back."},
    "api:account-signup": {"username": "newbie", "email": "newbie@example.com", "password": "a-long-passphrase-42"},
    "api:account-verify": {"token": "not-a-token", "password": "a-long-passphrase-42"},
    "api:account-verify-resend": {"email": "newbie@example.com"},
    "api:account-password-reset": {"email": "alice@example.com"},
    "api:account-password-reset-confirm": {"uid": "MQ", "token": "x-y", "new_password": "a-long-passphrase-42"},
    "api:account-addresses": {"address": ADDRESS_US},
    "api:account-address": {"is_default_billing": True},
    "api:stock-detail": {"delta": 1, "reason": "access test"},
    "api:auth-token": {"username": "alice", "password": "pw-alice-123"},
}
_keys = itertools.count()


def call(client, method: str, name: str, args: dict):
    url = reverse(name, kwargs={arg: args[arg] for arg in ENDPOINTS[name]})
    body = {}
    if method in {"POST", "PUT", "PATCH"} and name in BODIES:
        body = {"data": json.dumps(BODIES[name]), "content_type": "application/json"}
    return client.generic(method, url, HTTP_IDEMPOTENCY_KEY=f"access-{next(_keys)}", **body)


def code_of(response) -> str | None:
    content_type = response.get("Content-Type", "")
    if not response.content:
        return None
    if content_type.startswith("application/json"):
        body = response.json()
        return body.get("code") if isinstance(body, dict) else None  # a list (of addresses, say) is no refusal
    if content_type.startswith("application/vnd.oai.openapi"):  # the schema view answers in YAML
        body = yaml.safe_load(response.content)
        return body.get("code") if isinstance(body, dict) and "openapi" not in body else None
    return None


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_caller_gets_exactly_the_expected_answer(world, name, method, role):
    rows = EXPECTED[name]
    status, code = rows.get(method, rows["other"])[role]
    response = call(world["clients"][role], method, name, world["args"])
    if method == "HEAD":
        code = None  # no body to carry it
    assert (response.status_code, code_of(response)) == (status, code), response.content[:300]


@pytest.mark.parametrize("name", ["api:order-detail", "api:order-pay", "api:order-cancel"])
def test_another_customers_order_looks_exactly_like_no_order(world, name):
    method = "GET" if name == "api:order-detail" else "POST"
    stranger = world["clients"]["stranger"]
    theirs = call(stranger, method, name, world["args"])
    missing = call(stranger, method, name, {**world["args"], "number": "NO-SUCH-ORDER"})
    assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())
    assert Order.objects.get(pk=world["order"].pk).status == "awaiting_payment"


@pytest.mark.parametrize("role", ROLES)
def test_the_payment_webhook_answers_every_caller_alike_by_the_signature_alone(world, role):
    """Outside /api/: no session or token counts there, only the signature (tests/orders/test_payment_webhooks.py)."""
    client = world["clients"][role]
    unsigned = client.post("/payments/stripe/webhook/", data="{}", content_type="application/json")
    assert (unsigned.status_code, unsigned.json()["code"]) == (400, "invalid_signature")
    for method in ("GET", "PUT", "DELETE"):
        assert client.generic(method, "/payments/stripe/webhook/").status_code == 405
