"""Staff create and edit vouchers in the admin and see each one's uses: reserved, committed, released."""

import uuid

import pytest

from orders.services import order_cancel, order_place
from tests.conftest import pay
from vouchers.models import Voucher

pytestmark = pytest.mark.django_db


def _place(email):
    return order_place(
        email=email, items=[{"sku": "MUG", "quantity": 1}], idempotency_key=uuid.uuid4().hex, voucher="drop20"
    )


def test_staff_create_a_voucher_for_some_products_and_see_its_uses(staff_admin, make_variant, provider):
    mug = make_variant(sku="MUG", stock=10, price="10.00")
    form = {
        "code": " drop20 ",
        "description": "Drop day",
        "kind": "percentage",
        "value": "20",
        "usage_limit": "100",
        "limit_per_customer": "1",
        "products": [mug.product.pk],
        "uses-TOTAL_FORMS": "0",
        "uses-INITIAL_FORMS": "0",
    }

    created = staff_admin.post("/admin/vouchers/voucher/add/", form)

    assert created.status_code == 302, created.content.decode()[:2000]
    voucher = Voucher.objects.get()
    assert voucher.code == "DROP20" and list(voucher.products.all()) == [mug.product]
    pay(_place("a@example.com"))
    order_cancel(order=_place("b@example.com"))
    _place("c@example.com")

    listing = staff_admin.get("/admin/vouchers/voucher/").content.decode()
    change = staff_admin.get(f"/admin/vouchers/voucher/{voucher.pk}/change/").content.decode()

    assert '<td class="field-uses_reserved">1</td><td class="field-uses_committed">1</td>' in listing
    assert '<td class="field-uses_released">1</td>' in listing
    assert change.count("a@example.com") == 1 and "committed" in change and "released" in change


def test_a_limit_below_the_uses_held_and_a_duplicate_code_are_refused(staff_admin, make_variant, make_voucher):
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher(usage_limit=5)
    _place("a@example.com")
    _place("b@example.com")
    base = {"kind": "percentage", "value": "10", "uses-TOTAL_FORMS": "0", "uses-INITIAL_FORMS": "2"}

    lowered = staff_admin.post(
        f"/admin/vouchers/voucher/{voucher.pk}/change/", base | {"code": "DROP20", "usage_limit": "1"}
    )
    duplicate = staff_admin.post("/admin/vouchers/voucher/add/", base | {"code": "Drop20", "uses-INITIAL_FORMS": "0"})

    assert lowered.status_code == 200 and "2 uses are held by orders already" in lowered.content.decode()
    assert duplicate.status_code == 200 and "A voucher with this code exists" in duplicate.content.decode()
    voucher.refresh_from_db()
    assert (voucher.usage_limit, voucher.uses_reserved, Voucher.objects.count()) == (5, 2, 1)
