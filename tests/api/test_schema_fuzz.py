"""schemathesis fuzzes every operation of /api/schema/: no 5xx, every response as documented.

The stateless test sends every operation random input, as staff and as a customer. Random order
numbers only ever 404, so the stateful test follows the links schemathesis infers from the schema
(an order's ``number`` from ``POST /api/orders/``) and pays, cancels and reads real orders.
"""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

from config.wsgi import application
from inventory.services import stock_restock
from tests.conftest import client_for, sold_out_marks_lapse

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
# The stateful run spends its budget on sequences of valid requests; the stateless one sends invalid ones.
schema.config.phases.stateful.generation.modes = [GenerationMode.POSITIVE]

# Plenty, a little, none, and goods that ship: orders get placed, run short, are refused, and are
# priced for an address and a shipping method.
SKUS = ("BULK", "MUG", "TEE", "LAMP")

# Every check but "schema-valid data must be accepted": an unknown SKU, wrong credentials or too little
# stock are well-formed requests the API must refuse (with a documented 4xx).
EXCLUDED_CHECKS = [positive_data_acceptance]


@(
    schema.hook("flatmap_case")
    .apply_to(method="POST", path="/api/orders/")
    .apply_to(method="POST", path="/api/checkout/quote/")
)
def _orders_for_real_skus(context, case):
    """Random SKUs are all unknown: most valid order requests name the shop's, so orders get placed (or run short)."""
    if case.meta.generation.mode is not GenerationMode.POSITIVE or not isinstance(case.body, dict):
        return st.just(case)  # an invalid request must stay invalid
    items = case.body.get("items") or [{"quantity": 1}]
    placeable = {**case.body, "items": [{**items[0], "sku": SKUS[0]}]}
    mixed = {**case.body, "items": [{**item, "sku": sku} for item, sku in zip(items, SKUS, strict=False)]}
    bodies = st.sampled_from([placeable, placeable, mixed, case.body])
    return st.tuples(bodies, st.uuids()).map(lambda drawn: _with_body(case, *drawn))


def _with_body(case, body, fresh_key):
    """``case`` sending ``body`` with a fresh Idempotency-Key: a random one is often blank, and a short one
    recurs from one example to the next, replaying an order an earlier example placed, so the next steps
    would depend on what ran before (Hypothesis refuses such flaky data). Replays have tests of their own."""
    if body is not case.body:
        case.headers["Idempotency-Key"] = str(fresh_key)
    case.body = body
    return case


@pytest.fixture
def tokens(db, make_variant, staff_user, customer, settings, shipping_rules):
    """Stock to order, and the Authorization headers of staff (every operation) and a customer."""
    settings.ORDER_THROTTLE_RATE = "100000/minute"  # the fuzzer places hundreds of orders
    make_variant(sku="BULK", stock=10**7)
    make_variant(sku="MUG", stock=50)
    make_variant(sku="TEE", stock=0)
    make_variant(sku="LAMP", stock=50, requires_shipping=True, weight_grams=1200)
    # Called as a raw WSGI app, Django would close the test's database connection after each request
    # (the test client unhooks this the same way).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield {user: client_for(user)._credentials["HTTP_AUTHORIZATION"] for user in (staff_user, customer)}
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


# What the stateful test must reach on real orders.
ORDER_OPERATIONS = {"POST /api/orders/{number}/pay/", "POST /api/orders/{number}/cancel/", "GET /api/orders/{number}/"}
# No example database: an example stored by an earlier run drew from an earlier schema and a database in
# another state, and replaying it fails as "inconsistent data generation" instead of testing anything.
FUZZ = hypothesis_settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@schema.parametrize()
@FUZZ
def test_the_api_keeps_its_schema_and_never_fails_with_a_5xx(case, tokens, staff_user):
    case.call_and_validate(headers={"Authorization": tokens[staff_user]}, excluded_checks=EXCLUDED_CHECKS)


@schema.include(path_regex="^/api/orders/").parametrize()
@FUZZ
def test_a_customers_orders_keep_the_schema_and_never_fail_with_a_5xx(case, tokens, customer):
    """Staff may do everything, but the order operations are a customer's: fuzz them with a customer's token too."""
    case.call_and_validate(headers={"Authorization": tokens[customer]}, excluded_checks=EXCLUDED_CHECKS)


def test_orders_followed_through_their_links_keep_the_schema_and_never_fail(tokens, customer):
    """Place, then pay, cancel and read the order placed, in random sequences, as its customer."""
    answered = set()
    # Every example finds the same stock: one that sold MUG out would change what the next one can do.
    stock_restock(sku="MUG", quantity=10**6, reason="fuzz: ample for every example")

    # Placing, paying, cancelling and reading only: refunds and shipments are staff's, and they and returns are
    # fuzzed statelessly above; every other operation a link may lead to takes a step the sequences need.
    orders = schema.include(path_regex="^/api/orders/").exclude(path_regex="/(refund|ship|returns)/$")

    class Workflow(orders.as_state_machine()):
        def setup(self):
            """Every sequence starts from the same orders and stock: Hypothesis replays a sequence's first
            steps and refuses ("inconsistent data generation") answers that changed since, such as an
            order list that an earlier sequence grew."""
            self.savepoint = transaction.savepoint()

        def teardown(self):
            transaction.savepoint_rollback(self.savepoint)
            sold_out_marks_lapse()

        def get_call_kwargs(self, case):
            return {"headers": {"Authorization": tokens[customer]}}

        def after_call(self, response, case):
            super().after_call(response, case)
            answered.add((case.operation.label, response.status_code))

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(
                response,
                additional_checks=additional_checks,
                excluded_checks=EXCLUDED_CHECKS,
                headers=kwargs["headers"],  # so that the auth checks know this token is sent on purpose
                transport_kwargs=kwargs,
                recorder=self.recorder,
            )

    Workflow.run(settings=hypothesis_settings(FUZZ, max_examples=40, stateful_step_count=6))
    # The links were followed: real orders were found (a random number is only ever a 404).
    found = {label for label, status in answered if status != 404}
    assert found >= ORDER_OPERATIONS, sorted(answered)
