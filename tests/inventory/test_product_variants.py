"""A product in sizes and colours: variants made from options in the admin, their stock set in one list, and a
flash sale on one size that oversells nothing and leaves the other sizes alone."""

import random
from decimal import Decimal

import pytest
from django.urls import reverse

from inventory.models import StockMovement
from inventory.services import stock_adjust
from inventory.variants import product_variants_generate
from orders.models import OrderLine
from shop.models import Option, OptionValue, Product, ProductVariant
from tests.conftest import assert_books_balance, messages_of, stock_of
from tests.inventory.test_concurrency import _place
from tests.race import run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sizes_and_colours():
    size, colour = Option.objects.create(name="Size"), Option.objects.create(name="Colour")
    sizes = [OptionValue.objects.create(option=size, value=v, position=i) for i, v in enumerate(["41", "42", "43"])]
    colours = [OptionValue.objects.create(option=colour, value=v) for v in ["Black", "White"]]
    return sizes, colours


def test_staff_make_every_size_in_every_colour_at_once_in_the_admin(staff_admin, sizes_and_colours, shop_staff):
    sizes, colours = sizes_and_colours
    sneaker = Product.objects.create(name="Air Max")
    url = reverse("admin:shop_product_variants_generate", args=[sneaker.pk])
    assert "Make variants from options" in staff_admin.get(reverse("admin:shop_product_change", args=[sneaker.pk])).text

    chosen = [v.pk for v in [*sizes, *colours]]
    response = staff_admin.post(url, {"values": chosen, "price": "149.00", "initial_stock": "4"})

    assert response.status_code == 302 and response.url == reverse("admin:shop_product_stock", args=[sneaker.pk])
    variants = list(ProductVariant.objects.filter(product=sneaker).order_by("sku"))
    assert [v.sku for v in variants] == [
        "AIR-MAX-BLACK-41", "AIR-MAX-BLACK-42", "AIR-MAX-BLACK-43",
        "AIR-MAX-WHITE-41", "AIR-MAX-WHITE-42", "AIR-MAX-WHITE-43",
    ]  # fmt: skip
    black_42 = ProductVariant.objects.get(sku="AIR-MAX-BLACK-42")
    assert black_42.name == "Air Max, Black / 42" and black_42.price == Decimal("149.00")
    assert {str(v) for v in black_42.option_values.all()} == {"Colour Black", "Size 42"}
    for variant in variants:
        assert stock_of(variant).on_hand == 4
        assert_books_balance(variant)
    assert StockMovement.objects.filter(actor=shop_staff, kind="restock").count() == 6
    assert "6 variants created" in messages_of(response)[0]

    # Made again with one more size: only the new combinations are made.
    size_44 = OptionValue.objects.create(option=sizes[0].option, value="44", position=3)
    staff_admin.post(url, {"values": [*chosen, size_44.pk], "price": "149.00", "initial_stock": "0"})
    assert ProductVariant.objects.filter(product=sneaker).count() == 8


def test_nothing_chosen_or_a_bad_price_is_a_form_error(staff_admin, sizes_and_colours):
    sneaker = Product.objects.create(name="Air Max")
    url = reverse("admin:shop_product_variants_generate", args=[sneaker.pk])

    for bad in [{"price": "10", "initial_stock": "0"}, {"values": [sizes_and_colours[0][0].pk], "price": "-1"}]:
        response = staff_admin.post(url, {"initial_stock": "0", **bad})
        assert response.status_code == 200 and response.context["form"].errors
    assert not ProductVariant.objects.exists()


def test_staff_set_the_stock_of_every_variant_in_one_list_each_change_ledgered(
    staff_admin, sizes_and_colours, shop_staff
):
    sizes, colours = sizes_and_colours
    sneaker = Product.objects.create(name="Air Max")
    product_variants_generate(product=sneaker, values=[*sizes, colours[0]], price=Decimal("99"), initial_stock=5)
    url = reverse("admin:shop_product_stock", args=[sneaker.pk])
    page = staff_admin.get(url)
    formset = page.context["formset"]
    assert [v.sku for v, _ in page.context["rows"]] == ["AIR-MAX-BLACK-41", "AIR-MAX-BLACK-42", "AIR-MAX-BLACK-43"]
    data = {f"form-{k}": v for k, v in formset.management_form.initial.items()}
    for i, row in enumerate(formset.forms):
        data.update({f"form-{i}-{name}": value for name, value in row.initial.items()})
    data["form-1-new_on_hand"] = "12"  # 42 restocked
    data["form-2-new_on_hand"] = "0"  # 43 counted out

    without_reason = staff_admin.post(url, data)
    assert (
        without_reason.status_code == 200 and stock_of(ProductVariant.objects.get(sku="AIR-MAX-BLACK-42")).on_hand == 5
    )

    response = staff_admin.post(url, {**data, "reason": "stock take"})

    assert response.status_code == 302
    on_hand = {v.sku: stock_of(v).on_hand for v in ProductVariant.objects.filter(product=sneaker)}
    assert on_hand == {"AIR-MAX-BLACK-41": 5, "AIR-MAX-BLACK-42": 12, "AIR-MAX-BLACK-43": 0}
    adjustments = StockMovement.objects.filter(kind="adjust", reason="stock take", actor=shop_staff)
    assert sorted(adjustments.values_list("on_hand_delta", flat=True)) == [-5, 7]
    # The same list posted again is stale: the versions moved, nothing changes twice.
    again = staff_admin.post(url, {**data, "reason": "stock take"}, follow=True)
    assert any("nothing was saved" in m for m in messages_of(again))
    assert StockMovement.objects.filter(kind="adjust").count() == 2
    for variant in ProductVariant.objects.filter(product=sneaker):
        assert_books_balance(variant)


def test_a_flash_sale_on_one_size_oversells_nothing_and_leaves_the_other_sizes_alone(sizes_and_colours):
    sizes, colours = sizes_and_colours
    sneaker = Product.objects.create(name="Air Max")
    product_variants_generate(product=sneaker, values=[*sizes, colours[0]], price=Decimal("149"), initial_stock=30)
    # Collected at the launch store: orders without an address, as the stock engine's tests place them.
    ProductVariant.objects.filter(product=sneaker).update(requires_shipping=False)
    hot = ProductVariant.objects.get(sku="AIR-MAX-BLACK-42")
    stock_adjust(sku=hot.sku, set_to=20, expected_version=stock_of(hot).version, reason="drop allocation")
    others = {v.sku: (stock_of(v).on_hand, stock_of(v).reserved, stock_of(v).version)
              for v in ProductVariant.objects.filter(product=sneaker).exclude(pk=hot.pk)}  # fmt: skip
    rng = random.Random(7)
    jobs = [{"items": [{"sku": hot.sku, "quantity": rng.randint(1, 2)}], "key": f"drop-{i}"} for i in range(120)]

    results = run_parallel(_place, jobs, processes=8)

    outcomes = [r["outcome"] for r in results]
    assert set(outcomes) <= {"placed", "insufficient_stock"}, set(outcomes)
    sold = sum(job["items"][0]["quantity"] for job, r in zip(jobs, results, strict=True) if r["outcome"] == "placed")
    stock = stock_of(hot)
    assert stock.reserved == sold and stock.available >= 0 and sold >= 19  # 0 oversold; at most 1 unit unsold
    assert sum(OrderLine.objects.filter(variant=hot).values_list("quantity", flat=True)) == sold
    assert_books_balance(hot)
    after = {v.sku: (stock_of(v).on_hand, stock_of(v).reserved, stock_of(v).version)
             for v in ProductVariant.objects.filter(product=sneaker).exclude(pk=hot.pk)}  # fmt: skip
    assert after == others
    assert not OrderLine.objects.exclude(variant=hot).exists()
