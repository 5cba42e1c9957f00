"""An order's life after payment, as a property (issue 49): random interleavings of partial shipments, refunds
by line with and without restock, returns asked, accepted and refused, and refunds made in the provider's
dashboard. A model kept here, apart from the shop's code, says what each step should do: done or refused, and
what it moves. After every step the lines, the money and the stock agree with it: the unit rule holds
(``order_line_list_units_broken`` and this module's own check of the counts), a refusal changes nothing, the
stock counters equal the ledger and on hand is the initial stock less the units that left the shelf and did
not come back, and the order's refunds equal the payment's. Each example ends with ``reconcile --full``.

Each example places an order of its own SKUs (the test's transaction holds them all: the stock services
open durable transactions, so an example cannot be rolled back on its own).
"""

import io
import itertools
import os
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.db.models import Sum
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.errors import DomainError
from core.money import money_round
from fulfilment.models import ReturnRequest, Shipment, ShipmentLine
from fulfilment.services import Tracking, order_ship
from fulfilment.services.returns import return_request_accept, return_request_create, return_request_refuse
from inventory.models import StockMovement
from orders.models import Order
from orders.services import order_place
from orders.units import REFUND_RESTOCK
from payments.drift import order_line_list_units_broken, payment_list_refund_drift
from payments.models import Payment, Refund
from payments.providers.local import local_event
from payments.services import order_refund
from tests.conftest import assert_books_balance, pay, stock_of, webhook_deliver

pytestmark = pytest.mark.django_db

_examples = itertools.count(1)
DHL = Tracking(carrier="DHL", number="00340434161094015902")
STEPS = 10  # at most, per example
MAX_SKUS = 3  # an order's SKUs, at most; a step may name one it does not have: refused


@dataclass
class LineModel:
    """One line as the test counts it: cancelled (refunded, never shipped) and kept (refunded at the customer)
    apart, and the units its refunds put back on hand."""

    ordered: int
    paid: Decimal  # what the buyer paid for the line, all units
    stock: int  # the SKU's on hand before the order
    shipped: int = 0
    returned: int = 0
    cancelled: int = 0
    kept: int = 0
    restocked: int = 0

    @property
    def refunded(self) -> int:
        return self.returned + self.cancelled + self.kept

    @property
    def shippable(self) -> int:
        return self.ordered - self.shipped - self.cancelled

    @property
    def at_customer(self) -> int:
        return self.shipped - self.returned - self.kept

    def share(self, units: int, currency: str) -> Decimal:
        """What ``units`` more refunded units of the line are worth: the line's shares are rounded from its start."""

        def upto(count):
            return money_round(self.paid * count / self.ordered, currency)

        return upto(self.refunded + units) - upto(self.refunded)


@dataclass
class OrderModel:
    lines: list[LineModel]
    total: Decimal
    currency: str
    refunded: Decimal = Decimal(0)  # what the provider refunded in all, ours and its dashboard's
    returns: list = field(default_factory=list)  # [pk, {index: units}, state]

    @property
    def paid_back(self) -> bool:
        return self.refunded >= self.total

    @property
    def status(self) -> str:
        """Refunded once all it paid is back; else shipped once nothing is left to ship, if anything was."""
        if self.paid_back:
            return Order.Status.REFUNDED
        if not any(line.shipped for line in self.lines):
            return Order.Status.PAID
        if any(line.shippable for line in self.lines):
            return Order.Status.PARTIALLY_SHIPPED
        return Order.Status.SHIPPED

    def known(self, quantities: dict[int, int]) -> bool:
        return all(index < len(self.lines) for index in quantities)

    def asked(self, index: int) -> int:
        return sum(q.get(index, 0) for _, q, state in self.returns if state == ReturnRequest.State.REQUESTED)

    def refund_units(self, quantities: dict[int, int], *, restock: bool, returning: bool) -> Decimal:
        """Refund the units: a return's come back; others are the unshipped ones first (cancelled, back on
        hand with ``restock``), then those the customer keeps. What they are worth, before the money left."""
        amount = sum((self.lines[i].share(n, self.currency) for i, n in quantities.items()), start=Decimal(0))
        for index, units in quantities.items():
            line = self.lines[index]
            if returning:
                line.returned += units
                line.restocked += units
                continue
            cancelled = min(units, line.shippable)
            line.cancelled += cancelled
            line.kept += units - cancelled
            line.restocked += cancelled if restock else 0
        return amount

    def refund_by_shop(self, quantities: dict[int, int], *, restock: bool, returning: bool) -> None:
        amount = self.refund_units(quantities, restock=restock, returning=returning)
        self.refunded += min(amount, self.total - self.refunded)


KINDS = ["ship", "refund", "ask", "accept", "refuse", "dashboard", "echo"]


def step_draw(data, model: OrderModel) -> tuple:
    """A step drawn against the model's state, so most can be done and some are refused: a unit count up to
    one more than the model allows (more than is left to ship, refund or return), now and then a SKU the
    order does not have."""
    likely = ["ship"] * 2 + ["ask"] * 3 * any(line.at_customer for line in model.lines)
    likely += ["accept"] * 5 * any(state == ReturnRequest.State.REQUESTED for _, _, state in model.returns)
    kind = data.draw(st.sampled_from(KINDS + likely))

    def units(room) -> dict[int, int]:
        # Mostly lines with room, some without, now and then a SKU not in the order.
        roomy = [i for i in range(len(model.lines)) if room(i) > 0]
        indexes = roomy * 6 + [*range(len(model.lines))] + [MAX_SKUS]
        skus = data.draw(st.sets(st.sampled_from(indexes), min_size=1, max_size=2))
        return {i: data.draw(st.integers(1, room(i) + 1 if i < len(model.lines) else 1)) for i in skus}

    if kind == "ship":
        return (kind, units(lambda i: model.lines[i].shippable))
    if kind == "refund":
        return (kind, units(lambda i: model.lines[i].ordered - model.lines[i].refunded), data.draw(st.booleans()))
    if kind == "ask":
        return (kind, units(lambda i: model.lines[i].at_customer - model.asked(i)))
    if kind in ("accept", "refuse"):
        return (kind, data.draw(st.integers(0, 3)))  # of the returns asked, counted from the last one
    if kind == "dashboard":  # a percent of what is left, now and then the rest
        return (kind, data.draw(st.sampled_from([10, 50, 1, 99, 33, 66, 100])))
    return (kind,)  # echo: the provider tells again what it refunded so far


orders = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["2.50", "3.33", "20.00"])), min_size=2, max_size=3)


class AfterPayment:
    """One example: the shop's order and the model of it, each step applied to both and compared."""

    def __init__(self, make_variant, provider, order_lines):
        provider.reset()
        caches["default"].delete_pattern("throttle_*")
        self.provider = provider
        self.dashboard = Decimal(0)  # refunded in the provider's dashboard
        self.variants = [make_variant(stock=quantity + 2, price=price) for quantity, price in order_lines]
        items = [{"sku": v.sku, "quantity": q} for v, (q, _) in zip(self.variants, order_lines, strict=True)]
        self.order = pay(order_place(email="ann@example.com", items=items, idempotency_key=f"k{next(_examples)}"))
        assert self.order.status == Order.Status.PAID
        self.payment = Payment.objects.get(reference=self.order.payment_reference)
        lines = self.order.lines.order_by("pk")
        self.model = OrderModel(
            lines=[
                LineModel(
                    ordered=line.quantity,
                    paid=line.line_total - line.discount + (0 if self.order.prices_include_tax else line.tax),
                    stock=quantity + 2,
                )
                for line, (quantity, _) in zip(lines, order_lines, strict=True)
            ],
            total=self.order.total,
            currency=self.order.currency,
        )
        self.check()

    def skus(self, quantities: dict[int, int]) -> dict[str, int]:
        return {
            self.variants[i].sku if i < len(self.variants) else f"NOT-IN-ORDER-{i}": n for i, n in quantities.items()
        }

    def step(self, step: tuple) -> None:
        """Apply ``step`` to the shop: done if the model says it may be, else refused changing nothing."""
        kind, *args = step
        model = self.model
        before = self.snapshot()
        if kind == "ship":
            (quantities,) = args
            allowed = (
                model.known(quantities)
                and not model.paid_back
                and all(n <= model.lines[i].shippable for i, n in quantities.items())
            )
            done = self.attempt(lambda: order_ship(order=self.order, tracking=DHL, quantities=self.skus(quantities)))
            if done:
                for index, n in quantities.items():
                    model.lines[index].shipped += n
        elif kind == "refund":
            quantities, restock = args
            allowed = (
                model.known(quantities)
                and not model.paid_back
                and all(n <= model.lines[i].ordered - model.lines[i].refunded for i, n in quantities.items())
            )
            done = self.attempt(
                lambda: order_refund(order=self.order, quantities=self.skus(quantities), restock=restock)
            )
            if done:
                model.refund_by_shop(quantities, restock=restock, returning=False)
        elif kind == "ask":
            (quantities,) = args
            allowed = model.known(quantities) and all(
                n <= model.lines[i].at_customer - model.asked(i) for i, n in quantities.items()
            )
            done = self.attempt(lambda: return_request_create(order=self.order, quantities=self.skus(quantities)))
            if done:
                model.returns.append([done.pk, quantities, ReturnRequest.State.REQUESTED])
        elif kind in ("accept", "refuse"):
            if not model.returns:
                return
            chosen = model.returns[-1 - args[0] % len(model.returns)]
            pk, quantities, state = chosen
            requested = state == ReturnRequest.State.REQUESTED
            if kind == "refuse":
                allowed = requested
                done = self.attempt(lambda: return_request_refuse(return_request=ReturnRequest(pk=pk)))
                if done:
                    chosen[2] = ReturnRequest.State.REFUSED
            else:
                allowed = (
                    requested
                    and not model.paid_back
                    and all(n <= model.lines[i].at_customer for i, n in quantities.items())
                )
                done = self.attempt(lambda: return_request_accept(return_request=ReturnRequest(pk=pk)))
                if done:
                    model.refund_by_shop(quantities, restock=True, returning=True)
                    chosen[2] = ReturnRequest.State.ACCEPTED
        elif kind == "dashboard":
            left = model.total - model.refunded
            if left <= 0:
                return
            (percent,) = args
            amount = left if percent == 100 else max(Decimal("0.01"), money_round(left * percent / 100, model.currency))
            allowed = done = True
            self.provider_says(model.refunded + amount)
            self.dashboard += amount
            if amount == left:  # the rest: every unit left is refunded with it, none restocked
                model.refund_units(
                    {
                        i: line.ordered - line.refunded
                        for i, line in enumerate(model.lines)
                        if line.refunded < line.ordered
                    },
                    restock=False,
                    returning=False,
                )
            model.refunded += amount
        else:  # echo
            allowed = done = True
            self.provider_says(model.refunded)
        event(f"{kind} {'done' if done else 'refused'}")  # --hypothesis-show-statistics counts them
        assert bool(done) == allowed, f"{step}: the shop {'did' if done else 'refused'} it, the model says otherwise"
        if not done:
            assert self.snapshot() == before, f"{step} was refused but changed the books"
        self.check()

    def attempt(self, action):
        """The action's result, or None if the shop refused it with one of its domain errors."""
        try:
            return action() or True
        except DomainError:
            return None

    def provider_says(self, refunded: Decimal) -> None:
        """The provider's ``charge.refunded``: ``refunded`` of the charge is back so far."""
        payment = Payment.objects.get(pk=self.payment.pk)
        webhook_deliver(local_event("charge.refunded", payment=payment, refunded=refunded))

    def snapshot(self) -> dict:
        order = Order.all_objects.get(pk=self.order.pk)
        payment = Payment.objects.get(pk=self.payment.pk)
        return {
            "lines": list(
                self.order.lines.order_by("pk").values_list(
                    "quantity_shipped", "quantity_refunded", "quantity_returned"
                )
            ),
            "order": (order.status, order.amount_refunded, order.shipping_refunded),
            "payment": (payment.state, payment.amount_refunded),
            "shipments": Shipment.objects.filter(order=order).count(),
            "refunds": list(Refund.objects.filter(order=order).values_list("state", "amount").order_by("pk")),
            "returns": list(ReturnRequest.objects.filter(order=order).values_list("state").order_by("pk")),
            "stock": [(stock_of(v).on_hand, stock_of(v).reserved) for v in self.variants],
            "ledger": StockMovement.objects.count(),
        }

    def check(self) -> None:
        """The shop's lines, money and stock against the model and the unit rule."""
        model = self.model
        lines = list(self.order.lines.select_related("variant").order_by("pk"))
        for line, expected in zip(lines, model.lines, strict=True):
            sku = line.variant.sku
            counts = (line.quantity_shipped, line.quantity_refunded, line.quantity_returned)
            assert counts == (expected.shipped, expected.refunded, expected.returned), sku
            # The unit rule, from the counts and the model's cancelled units.
            shipped, refunded, returned = counts
            assert shipped <= line.quantity and refunded <= line.quantity, sku
            assert returned <= shipped and returned <= refunded, sku
            assert shipped + expected.cancelled <= line.quantity, sku  # never a refunded unit shipped
            restocked = StockMovement.objects.filter(reason=REFUND_RESTOCK, order_line=line).aggregate(
                sum=Sum("on_hand_delta")
            )["sum"]
            assert (restocked or 0) == expected.restocked, sku
            assert expected.restocked <= expected.returned + expected.cancelled, sku
            in_shipments = ShipmentLine.objects.filter(order_line=line).aggregate(sum=Sum("quantity"))["sum"]
            assert (in_shipments or 0) == shipped, sku
        assert order_line_list_units_broken() == []
        for variant, expected in zip(self.variants, model.lines, strict=True):
            stock = stock_of(variant)
            assert (stock.on_hand, stock.reserved) == (expected.stock - expected.ordered + expected.restocked, 0)
        assert_books_balance(*self.variants)
        order = Order.all_objects.get(pk=self.order.pk)
        payment = Payment.objects.get(pk=self.payment.pk)
        asked = sum((amount for _, amount, _ in self.provider.refund_requests), start=Decimal(0))
        assert order.amount_refunded == payment.amount_refunded == model.refunded == asked + self.dashboard
        assert order.status == model.status
        returns = ReturnRequest.objects.filter(order=order).order_by("pk")
        assert list(returns.values_list("pk", "state")) == [(pk, state) for pk, _, state in model.returns]
        refunds = Refund.objects.filter(order=order).exclude(state=Refund.State.FAILED)
        assert not refunds.filter(state=Refund.State.REQUESTED).exists()
        assert (refunds.aggregate(sum=Sum("amount"))["sum"] or 0) == model.refunded
        assert payment_list_refund_drift(order_ids=[order.pk]) == []


@hypothesis_settings(
    max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 25)),  # more to hunt longer than CI does
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(order_lines=orders, data=st.data())
def test_after_payment_the_units_stock_and_refunds_always_agree(make_variant, provider, order_lines, data):
    life = AfterPayment(make_variant, provider, order_lines)
    for _ in range(data.draw(st.integers(4, STEPS), label="steps")):
        life.step(step_draw(data, life.model))
    call_command("reconcile", "--full", stdout=io.StringIO())
