"""The stock admin on real MariaDB + Redis: edits go through the service, stale forms are refused, the books balance.

Transactional tests: the admin's own request-wide transaction would make the service's durable one fail,
and only a real commit shows that it is not there.
"""

import random
import time
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.admin.stock import MOVEMENTS_SHOWN, STALE_MESSAGE
from inventory.models import Reservation, StockMovement
from inventory.services import stock_restock
from orders.models import Order
from orders.services import order_cancel, order_place
from tests.conftest import assert_books_balance, messages_of, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


class _FormFields(HTMLParser):
    """What a browser submits from a page: every named input, except buttons (the test picks "Save")."""

    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name") and attrs.get("type") != "submit":
            self.fields[attrs["name"]] = attrs.get("value") or ""


def form_fields(response) -> dict:
    parser = _FormFields()
    parser.feed(response.content.decode())
    return parser.fields


def change_url(stock) -> str:
    return reverse("admin:inventory_stock_change", args=[stock.pk])


def load_form(client, stock) -> dict:
    response = client.get(change_url(stock))
    assert response.status_code == 200
    return form_fields(response)


def save_form(client, stock, form, *, new_on_hand, reason):
    return client.post(change_url(stock), {**form, "new_on_hand": new_on_hand, "reason": reason, "_save": "Save"})


def place(sku, quantity, key):
    return order_place(email="x@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def test_the_stock_pages_open_for_staff(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    order = place("MUG", 2, "k1")
    stock = stock_of(mug)

    changelist = staff_admin.get(reverse("admin:inventory_stock_changelist"))
    page = staff_admin.get(change_url(stock))
    movements = staff_admin.get(reverse("admin:inventory_stockmovement_changelist") + f"?stock__id__exact={stock.pk}")
    reservation = Reservation.objects.get()
    reservations = staff_admin.get(reverse("admin:inventory_reservation_changelist"))
    reservation_page = staff_admin.get(reverse("admin:inventory_reservation_change", args=[reservation.pk]))

    assert changelist.status_code == page.status_code == movements.status_code == 200
    assert reservations.status_code == reservation_page.status_code == 200
    assert [(s.variant.sku, s.on_hand, s.reserved, s.available) for s in changelist.context["cl"].result_list] == [
        ("MUG", 10, 2, 8)
    ]
    form = form_fields(page)
    assert (form["new_on_hand"], form["loaded_version"]) == ("10", str(stock.version))
    assert "All 2 movements" in page.content.decode()
    assert [m.kind for m in movements.context["cl"].result_list] == ["reserve", "restock"]
    assert order.number in reservation_page.content.decode()


def test_stock_is_never_added_or_deleted_in_the_admin(staff_admin, make_variant):
    stock = stock_of(make_variant(sku="MUG", stock=1))

    assert staff_admin.get(reverse("admin:inventory_stock_add")).status_code == 403
    assert (
        staff_admin.post(reverse("admin:inventory_stock_delete", args=[stock.pk]), {"post": "yes"}).status_code == 403
    )
    assert staff_admin.get(reverse("admin:inventory_stock_changelist")).context["action_form"] is None  # no actions
    assert stock_of(stock.variant).on_hand == 1


def test_saving_the_form_adjusts_through_the_service_and_the_movement_shows_on_the_page(
    staff_admin, shop_staff, make_variant
):
    mug = make_variant(sku="MUG", stock=10)
    stock = stock_of(mug)

    response = save_form(staff_admin, stock, load_form(staff_admin, stock), new_on_hand=15, reason="stock take")

    assert response.status_code == 302
    assert response.url == change_url(stock)  # back on the same stock page
    assert messages_of(response) == ["MUG: On hand 10 → 15: stock take"]
    movement = StockMovement.objects.get(kind="adjust")
    assert (movement.on_hand_delta, movement.reason, movement.actor) == (5, "stock take", shop_staff)
    assert LogEntry.objects.get().get_change_message() == "On hand 10 → 15: stock take"
    page = staff_admin.get(response.url)
    newest = page.context["inline_admin_formsets"][0].formset.forms[0].instance
    assert newest == movement
    assert "stock take" in page.content.decode() and shop_staff.username in page.content.decode()
    assert stock_of(mug).on_hand == 15
    assert_books_balance(mug)


def test_a_form_loaded_before_an_order_is_refused_and_changes_nothing(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    stock = stock_of(mug)
    form = load_form(staff_admin, stock)
    place("MUG", 2, "k1")  # meanwhile, a customer orders

    response = save_form(staff_admin, stock, form, new_on_hand=4, reason="recount")

    assert response.status_code == 200
    [error] = response.context["adminform"].form.non_field_errors()
    assert STALE_MESSAGE in error
    assert "It now has 10 on hand, 2 reserved, 8 available" in error
    assert not StockMovement.objects.filter(kind="adjust").exists()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 2)
    assert_books_balance(mug)

    # The refused page carries the version it shows: saving it again is a decision made on those values.
    again = save_form(staff_admin, stock, form_fields(response), new_on_hand=4, reason="recount")
    assert again.status_code == 302
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (4, 2)
    assert_books_balance(mug)


def test_going_below_the_reserved_units_is_a_form_error(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    place("MUG", 4, "k1")
    stock = stock_of(mug)

    response = save_form(staff_admin, stock, load_form(staff_admin, stock), new_on_hand=3, reason="broken")

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["new_on_hand"] == [
        "It cannot go below the 4 units reserved for open orders."
    ]
    assert (stock_of(mug).on_hand, stock_of(mug).version) == (10, stock.version)
    assert_books_balance(mug)


@pytest.mark.parametrize(
    ("new_on_hand", "reason", "field", "error"),
    [
        (7, "", "reason", "This field is required."),
        (5, "recount", "new_on_hand", "On hand is already 5: nothing to change."),
        (-1, "recount", "new_on_hand", "Give a whole number from 0 to 1000000000, in digits 0-9."),
    ],
)
def test_a_bad_edit_is_a_form_error_and_writes_nothing(staff_admin, make_variant, new_on_hand, reason, field, error):
    mug = make_variant(sku="MUG", stock=5)
    stock = stock_of(mug)

    response = save_form(staff_admin, stock, load_form(staff_admin, stock), new_on_hand=new_on_hand, reason=reason)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == [error]
    assert StockMovement.objects.count() == 1
    assert stock_of(mug).version == stock.version


def test_view_only_staff_see_the_stock_but_cannot_change_it(client, staff_user, make_variant):
    stock = stock_of(make_variant(sku="MUG", stock=5))
    staff_user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_stock", "view_stockmovement", "view_product"])
    )
    client.force_login(staff_user)

    page = client.get(change_url(stock))

    assert page.status_code == 200
    assert "new_on_hand" not in form_fields(page)
    assert client.post(change_url(stock), {"new_on_hand": 9, "reason": "x"}).status_code == 403
    assert stock_of(stock.variant).on_hand == 5


def test_the_low_stock_filter(staff_admin, make_variant):
    sold_out = make_variant(sku="GONE", stock=2)
    place("GONE", 2, "k1")  # on hand but all reserved: out of stock
    make_variant(sku="LOW", stock=4)
    make_variant(sku="PLENTY", stock=12)

    def listed(level):
        response = staff_admin.get(reverse("admin:inventory_stock_changelist") + f"?stock_level={level}")
        return [stock.variant.sku for stock in response.context["cl"].result_list]

    assert listed("out") == ["GONE"]
    assert listed("low") == ["GONE", "LOW"]
    assert listed("ok") == ["PLENTY"]
    assert stock_of(sold_out).on_hand == 2


def test_the_movement_inline_shows_the_newest_movements_and_links_to_the_whole_ledger(staff_admin, make_variant):
    mug = make_variant(sku="MUG")
    for n in range(1, MOVEMENTS_SHOWN + 6):
        stock_restock(sku="MUG", quantity=1, reason=f"delivery {n}")

    page = staff_admin.get(change_url(stock_of(mug)))

    shown = [form.instance.reason for form in page.context["inline_admin_formsets"][0].formset.forms]
    assert shown == [f"delivery {n}" for n in range(MOVEMENTS_SHOWN + 5, 5, -1)]
    assert f"All {MOVEMENTS_SHOWN + 5} movements" in page.content.decode()
    ledger = staff_admin.get(reverse("admin:inventory_stockmovement_changelist") + "?q=MUG")
    assert ledger.context["cl"].result_count == MOVEMENTS_SHOWN + 5


def test_the_reservation_list_filters_and_search(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10)
    make_variant(sku="CAP", stock=10)
    fresh = place("MUG", 1, "k1")
    overdue = place("MUG", 2, "k2")
    cancelled = order_cancel(order=place("CAP", 3, "k3"))
    Reservation.objects.filter(order_line__order=overdue).update(expires_at=timezone.now() - timedelta(minutes=1))

    def listed(query):
        response = staff_admin.get(reverse("admin:inventory_reservation_changelist") + query)
        assert response.status_code == 200
        return {r.order_line.order.number for r in response.context["cl"].result_list}

    assert listed("?expired=yes") == {overdue.number}
    assert listed("?expired=no") == {fresh.number, cancelled.number}
    assert listed("?state=released&release_reason=cancelled") == {cancelled.number}
    assert listed(f"?q={fresh.number}") == {fresh.number}
    assert listed("?q=CAP") == {cancelled.number}


# --- The acceptance race: admin edits against orders from parallel processes ----------------------------


def _outcome(response) -> str:
    if response.status_code == 302:
        return "saved"
    text = response.content.decode()
    if response.status_code == 200 and STALE_MESSAGE in text:
        return "stale"
    if response.status_code == 200 and "reserved for open orders" in text:
        return "below_reserved"
    return f"unexpected {response.status_code}"


def _race_job(*, role, name, user_id, stock, orders=0):
    """One process: the stale editor, an editor, or a buyer. Returns what each attempt did; never raises."""
    if role == "buyer":  # orders through the API, as a storefront would place them
        api = APIClient()
        api.force_authenticate(user=get_user_model().objects.get(pk=user_id))
        wait_for_peers()
        results = []
        rng = random.Random(name)
        with override_settings(ORDER_THROTTLE_RATE="1000/minute"):
            for n in range(orders):
                body = {"items": [{"sku": "MUG", "quantity": rng.randint(1, 3)}]}
                response = api.post("/api/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=f"{name}-{n}")
                if response.status_code == 201:
                    results.append({"outcome": "placed", "number": response.json()["number"]})
                else:
                    results.append({"outcome": response.json()["code"]})
        return results

    client = Client()
    client.force_login(get_user_model().objects.get(pk=user_id))
    if role == "stale":
        form = load_form(client, stock)  # before any order: the barrier holds the buyers until now
        wait_for_peers()
        deadline = time.monotonic() + 60
        while not Order.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        response = save_form(client, stock, form, new_on_hand=int(form["new_on_hand"]) + 100, reason=name)
        return [{"outcome": _outcome(response), "reason": name}]

    wait_for_peers()
    rng = random.Random(name)
    results = []
    while sum(r["outcome"] == "saved" for r in results) < 3 and len(results) < 40:
        form = load_form(client, stock)
        base = int(form["new_on_hand"])
        new = max(0, base + rng.choice([-3, -2, -1, 2, 4, 6]))
        reason = f"{name}-{len(results)}"
        response = save_form(client, stock, form, new_on_hand=new, reason=reason)
        results.append({"outcome": _outcome(response), "reason": reason, "base": base, "new": new})
    return results


def test_admin_edits_racing_orders_from_parallel_processes_never_lose_a_reservation_or_oversell(
    shop_staff, make_variant
):
    mug = make_variant(sku="MUG", stock=20)
    stock = stock_of(mug)
    common = {"user_id": shop_staff.pk, "stock": stock}
    jobs = [
        {"role": "stale", "name": "stale edit", **common},
        {"role": "editor", "name": "editor-a", **common},
        {"role": "editor", "name": "editor-b", **common},
        *({"role": "buyer", "name": f"buyer-{n}", "orders": 8, **common} for n in range(3)),
    ]

    results = run_parallel(_race_job, jobs, processes=len(jobs), barrier=True)

    stale, edits, buys = results[0], results[1] + results[2], [r for job in results[3:] for r in job]
    # The form loaded before the orders was refused and wrote nothing.
    assert stale == [{"outcome": "stale", "reason": "stale edit"}]
    assert not StockMovement.objects.filter(reason="stale edit").exists()
    # Every edit either went through the service or was refused as a form error: no 500, no blind overwrite.
    assert {e["outcome"] for e in edits} <= {"saved", "stale", "below_reserved"}
    saved = [e for e in edits if e["outcome"] == "saved"]
    assert saved
    adjustments = StockMovement.objects.filter(kind="adjust")
    assert adjustments.count() == len(saved)
    for edit in saved:  # each applied exactly to the counters its form showed
        movement = adjustments.get(reason=edit["reason"])
        assert (movement.on_hand_delta, movement.actor_id) == (edit["new"] - edit["base"], shop_staff.pk)
    # Every order is accounted for and still holds its units.
    assert {b["outcome"] for b in buys} <= {"placed", "insufficient_stock"}
    placed = {b["number"] for b in buys if b["outcome"] == "placed"}
    assert set(Order.objects.values_list("number", flat=True)) == placed
    held = sum(r.quantity for r in Reservation.objects.filter(state="active", order_line__order__number__in=placed))
    stock = stock_of(mug)
    assert stock.reserved == held == sum(line.quantity for o in Order.objects.all() for line in o.lines.all())
    assert stock.on_hand == 20 + sum(e["new"] - e["base"] for e in saved)
    assert stock.reserved <= stock.on_hand
    assert_books_balance(mug)


def test_the_ledger_says_why_and_what_in_words_not_codes(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=5)
    order_cancel(order=order_place(email="x@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k"))
    stock_restock(sku="MUG", quantity=1, reason="refund_restock")

    ledger = staff_admin.get(reverse("admin:inventory_stockmovement_changelist")).content.decode()
    page = staff_admin.get(reverse("admin:inventory_stock_change", args=[stock_of(mug).pk])).content.decode()
    release = StockMovement.objects.get(kind=StockMovement.Kind.RELEASE)
    detail = staff_admin.get(reverse("admin:inventory_stockmovement_change", args=[release.pk])).content.decode()

    assert '<td class="field-why">Cancelled</td>' in ledger and "<p>Cancelled</p>" in page
    for html in (ledger, page):
        assert ">cancelled<" not in html and "Refund restock" in html and "refund_restock" not in html
    assert "Cancelled" in detail and ">cancelled<" not in detail
    assert str(release) == "Release: -2 reserved"
    assert "Restock: +5 on hand" in page and "on_hand+" not in page  # the movement rows' captions
    assert str(Reservation.objects.get()) == "2 × MUG (released)"
