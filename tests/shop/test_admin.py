"""The variant admin: stock shown read-only, variants created with their stock, soft delete end to end, and
a deleted product taking its variants out of sale.

Transactional tests: adding a variant receives its initial stock through the service, whose durable
transaction the admin's own request-wide transaction would break.
"""

from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from inventory.models import Stock, StockMovement
from orders.services import order_place
from shop.errors import ProductUnavailable
from shop.models import ProductVariant
from tests.conftest import assert_books_balance, messages_of, stock_of

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:shop_productvariant_changelist")


def listed(client, query="") -> list[str]:
    response = client.get(CHANGELIST + query)
    assert response.status_code == 200
    return [variant.sku for variant in response.context["cl"].result_list]


def run_action(client, action, *variants, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [p.pk for p in variants], "index": 0, **extra}
    return client.post(CHANGELIST + "?deleted=all", data)


def test_the_variant_list_and_page_show_the_stock_read_only(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10, price="12.50")
    stock = stock_of(mug)

    changelist = staff_admin.get(CHANGELIST)
    page = staff_admin.get(reverse("admin:shop_productvariant_change", args=[mug.pk]))

    assert changelist.status_code == page.status_code == 200
    [row] = changelist.context["cl"].result_list
    assert (row.sku, row.on_hand_units, row.reserved_units, row.available_units) == ("MUG", 10, 0, 10)
    [inline] = page.context["inline_admin_formsets"]
    assert inline.formset.model is Stock
    assert not inline.has_change_permission and not inline.has_add_permission
    assert reverse("admin:inventory_stock_change", args=[stock.pk]) in page.content.decode()


def test_adding_a_variant_creates_its_stock_and_receives_the_initial_stock(staff_admin, shop_staff):
    form = {"sku": "new-tee", "name": "New tee", "description": "", "price": "19.00", "initial_stock": "12"}
    response = staff_admin.post(reverse("admin:shop_productvariant_add"), {**form, "_save": "Save"})

    assert response.status_code == 302
    tee = ProductVariant.objects.get(sku="NEW-TEE")
    assert stock_of(tee).on_hand == 12
    restock = StockMovement.objects.get()
    assert (restock.kind, restock.on_hand_delta, restock.reason, restock.actor) == (
        "restock",
        12,
        "initial stock",
        shop_staff,
    )
    assert_books_balance(tee)

    empty = {**form, "sku": "EMPTY", "initial_stock": ""}
    assert staff_admin.post(reverse("admin:shop_productvariant_add"), empty).status_code == 302
    assert stock_of(ProductVariant.objects.get(sku="EMPTY")).on_hand == 0


def test_a_sku_kept_by_a_deleted_variant_is_a_form_error(staff_admin, make_variant):
    make_variant(sku="MUG").delete()

    form = {"sku": "mug", "name": "Another mug", "description": "", "price": "5.00", "initial_stock": "0"}
    response = staff_admin.post(reverse("admin:shop_productvariant_add"), form)

    assert response.status_code == 200
    assert "If it was deleted" in response.context["adminform"].form.errors["sku"][0]
    assert ProductVariant.all_objects.count() == Stock.objects.count() == 1


def test_editing_a_variant_changes_its_catalog_fields_only(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=3)
    url = reverse("admin:shop_productvariant_change", args=[mug.pk])
    stock_inline = staff_admin.get(url).context["inline_admin_formsets"][0].formset.management_form
    form = {"sku": "RENAMED", "product": mug.product_id, "name": "Big mug", "price": "14.00", "_save": "Save"}
    form.update({stock_inline.add_prefix(name): value for name, value in stock_inline.initial.items()})

    assert staff_admin.post(url, form).status_code == 302  # is_active unticked

    mug.refresh_from_db()
    assert (mug.sku, mug.name, str(mug.price), mug.is_active) == ("MUG", "Big mug", "14.00", False)
    assert stock_of(mug).on_hand == 3


def test_the_low_stock_filter(staff_admin, make_variant):
    make_variant(sku="GONE")
    make_variant(sku="LOW", stock=5)
    make_variant(sku="PLENTY", stock=6)

    assert listed(staff_admin, "?stock_level=out") == ["GONE"]
    assert listed(staff_admin, "?stock_level=low") == ["GONE", "LOW"]
    assert listed(staff_admin, "?stock_level=ok") == ["PLENTY"]


def test_delete_is_soft_and_the_list_hides_deleted_variants_by_default(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=4)  # its stock row and ledger would protect it from a real delete
    make_variant(sku="CAP")
    url = reverse("admin:shop_productvariant_delete", args=[mug.pk])

    confirm = staff_admin.get(url)
    assert confirm.status_code == 200 and not confirm.context["protected"]
    response = staff_admin.post(url, {"post": "yes"})

    assert response.status_code == 302
    assert ProductVariant.all_objects.get(sku="MUG").is_deleted
    assert stock_of(mug).on_hand == 4
    assert listed(staff_admin) == listed(staff_admin, "?deleted=no") == ["CAP"]
    assert listed(staff_admin, "?deleted=yes") == ["MUG"]
    assert listed(staff_admin, "?deleted=all") == ["CAP", "MUG"]
    page = staff_admin.get(reverse("admin:shop_productvariant_change", args=[mug.pk]))
    assert page.status_code == 200  # a deleted product can still be looked at


def test_bulk_delete_is_soft_and_restore_brings_variants_back(staff_admin, make_variant):
    mug, cap = make_variant(sku="MUG", stock=1), make_variant(sku="CAP", stock=1)

    response = run_action(staff_admin, "delete_selected", mug, cap, post="yes")

    assert response.status_code == 302
    assert ProductVariant.objects.count() == 0
    assert ProductVariant.all_objects.filter(is_deleted=True).count() == 2

    response = run_action(staff_admin, "restore_selected", mug)

    assert "Restored 1 product variant." in messages_of(response)
    assert listed(staff_admin) == ["MUG"]
    assert ProductVariant.objects.get(sku="MUG").deleted_at is None


def test_only_superusers_may_erase_variants(staff_admin, admin_client, make_variant):
    mug = make_variant(sku="MUG")
    mug.delete()

    staff_actions = dict(staff_admin.get(CHANGELIST).context["action_form"].fields["action"].choices)
    superuser_actions = dict(admin_client.get(CHANGELIST).context["action_form"].fields["action"].choices)

    assert "hard_delete_selected" not in staff_actions
    assert {"delete_selected", "restore_selected"} <= set(staff_actions)
    assert "hard_delete_selected" in superuser_actions
    run_action(staff_admin, "hard_delete_selected", mug)
    assert ProductVariant.all_objects.filter(sku="MUG").exists()


def test_erasing_takes_unused_deleted_variants_and_keeps_those_with_history(admin_client, make_variant):
    unused = make_variant(sku="TYPO")  # created by mistake: a stock row, no ledger
    stocked = make_variant(sku="MUG", stock=2)
    alive = make_variant(sku="CAP")
    unused.delete()
    stocked.delete()

    response = run_action(admin_client, "hard_delete_selected", unused, stocked, alive)

    assert messages_of(response) == [
        "Erased 1 product variant permanently.",
        "Kept, because other records need them: MUG Product MUG (still referred to by stocks)",
        "Skipped 1 product variant not deleted yet: delete first, then erase.",
    ]
    assert not ProductVariant.all_objects.filter(sku="TYPO").exists()
    assert not Stock.objects.filter(variant_id=unused.pk).exists()
    assert ProductVariant.all_objects.get(sku="MUG").is_deleted
    assert stock_of(stocked).on_hand == 2
    assert ProductVariant.objects.filter(sku="CAP").exists()


def variant_change_form(staff_admin, variant) -> tuple[str, dict]:
    """The variant's change page and what saving it unchanged posts (its stock inline's management form too)."""
    url = reverse("admin:shop_productvariant_change", args=[variant.pk])
    stock_inline = staff_admin.get(url).context["inline_admin_formsets"][0].formset.management_form
    form = {"product": variant.product_id, "name": "Mug", "price": "14.00", "is_active": "on", "_save": "Save"}
    form.update({stock_inline.add_prefix(name): value for name, value in stock_inline.initial.items()})
    return url, form


def test_staff_set_a_flash_sales_limit_and_start_in_the_admin(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=3)
    url, form = variant_change_form(staff_admin, mug)
    form.update({"max_per_customer": "2", "sale_starts_at_0": "2099-01-01", "sale_starts_at_1": "09:00:00"})

    assert staff_admin.post(url, form).status_code == 302

    mug.refresh_from_db()
    assert (mug.max_per_customer, mug.sale_starts_at.isoformat()) == (2, "2099-01-01T09:00:00+00:00")
    form["max_per_customer"] = "0"
    assert "Ensure this value is greater than or equal to 1." in staff_admin.post(url, form).content.decode()


def test_staff_set_a_sale_price_window_in_the_admin_and_a_bad_one_is_explained(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=3, price="14.00")
    url, form = variant_change_form(staff_admin, mug)
    form.update({"sale_price": "9.50", "sale_price_until_0": "2099-01-02", "sale_price_until_1": "09:00:00"})

    assert staff_admin.post(url, form).status_code == 302
    mug.refresh_from_db()
    assert (mug.sale_price, mug.sale_price_until.isoformat()) == (Decimal("9.50"), "2099-01-02T09:00:00+00:00")

    form.update({"sale_price_from_0": "2099-01-03", "sale_price_from_1": "09:00:00"})  # starts after it ends
    answer = staff_admin.post(url, form)
    assert answer.status_code == 200 and "The sale price must end after it starts." in answer.content.decode()
    form.update({"sale_price": "", "sale_price_from_0": "", "sale_price_from_1": ""})  # a window with no price
    assert "Give the sale price the start and end are for." in staff_admin.post(url, form).content.decode()
    mug.refresh_from_db()
    assert (mug.sale_price, mug.sale_price_from) == (Decimal("9.50"), None)  # unchanged by the refusals


def test_deleting_a_product_takes_its_variants_out_of_sale(staff_admin, make_variant):
    black = make_variant(sku="HOODIE-BLACK", stock=2)
    white = make_variant(sku="HOODIE-WHITE", stock=2, product=black.product)
    mug = make_variant(sku="MUG", stock=1)

    response = staff_admin.post(reverse("admin:shop_product_delete", args=[black.product_id]), {"post": "yes"})

    assert response.status_code == 302
    assert set(ProductVariant.all_objects.filter(is_deleted=True).values_list("sku", flat=True)) == {
        black.sku,
        white.sku,
    }
    assert not ProductVariant.all_objects.get(pk=mug.pk).is_deleted
    with pytest.raises(ProductUnavailable):
        order_place(email="a@example.com", items=[{"sku": "HOODIE-BLACK", "quantity": 1}], idempotency_key="k")
    assert stock_of(white).on_hand == 2
