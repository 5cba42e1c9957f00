"""Browsing a drop's catalog: categories with breadcrumbs, the product page's variant picker, pagination,
filters, sorting and a search that uses an index, through the pages and the API."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from inventory.services import stock_adjust
from inventory.variants import product_variants_generate
from shop.models import Category, Option, OptionValue, Product, ProductVariant
from shop.selectors import product_ids_matching, product_search_queries
from tests.conftest import stock_of

# Committed rows: InnoDB's FULLTEXT index sees a row once its transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def drop(make_variant):
    """Shoes > Sneakers holds the Air Max in sizes 41-43 (42 sold out); Accessories holds a cap and a mug."""
    shoes = Category.objects.add_root({"name": "Shoes", "slug": "shoes"})
    sneakers = Category.objects.add_child(shoes, {"name": "Sneakers", "slug": "sneakers"})
    accessories = Category.objects.add_root({"name": "Accessories", "slug": "accessories"})
    size = Option.objects.create(name="Size")
    sizes = [OptionValue.objects.create(option=size, value=v, position=i) for i, v in enumerate(["41", "42", "43"])]
    air_max = Product.objects.create(name="Air Max sneaker", description="The drop.", category=sneakers)
    product_variants_generate(product=air_max, values=sizes, price=Decimal("149.00"), initial_stock=3)
    sold_out = ProductVariant.objects.get(sku="AIR-MAX-SNEAKER-42")
    stock_adjust(sku=sold_out.sku, set_to=0, expected_version=stock_of(sold_out).version, reason="sold elsewhere")
    cap = make_variant(sku="CAP-NAVY", name="Navy cap", price="22.00", stock=5)
    mug = make_variant(sku="MUG-LOGO", name="Logo mug", price="12.50", stock=0)
    Product.objects.filter(pk__in=[cap.product_id, mug.product_id]).update(category=accessories)
    return {"shoes": shoes, "sneakers": sneakers, "air_max": air_max, "sizes": sizes}


def names(response) -> list[str]:
    return [product.name for product in response.context["products"]]


def test_a_category_page_lists_its_subtree_with_breadcrumbs(client, drop):
    shoes = client.get(reverse("category", args=["shoes"]))
    sneakers = client.get(reverse("category", args=["sneakers"]))

    assert names(shoes) == names(sneakers) == ["Air Max sneaker"]
    assert [c.name for c in sneakers.context["breadcrumbs"]] == ["Shoes"]
    page = sneakers.content.decode()
    assert f'<a href="{reverse("category", args=["shoes"])}">Shoes</a>' in page
    assert '<li aria-current="page">Sneakers</li>' in page
    assert names(client.get(reverse("category", args=["accessories"]))) == ["Logo mug", "Navy cap"]
    assert client.get(reverse("category", args=["no-such"])).status_code == 404


def test_the_product_page_picks_a_size_and_shows_the_sold_out_one_disabled(client, drop):
    page = client.get(reverse("product", args=["AIR-MAX-SNEAKER-41"]))

    html = page.content.decode()
    [(option, choices)] = page.context["picker"]
    assert option == "Size"
    assert [(c.value, c.sku, c.sold_out, c.current) for c in choices] == [
        ("41", "AIR-MAX-SNEAKER-41", False, True),
        ("42", "AIR-MAX-SNEAKER-42", True, False),
        ("43", "AIR-MAX-SNEAKER-43", False, False),
    ]
    assert '<button type="button" class="choice" disabled data-sold-out="AIR-MAX-SNEAKER-42">42' in html
    link = reverse("product", args=["AIR-MAX-SNEAKER-43"])
    assert f'<a class="choice" href="{link}" data-choice-for="AIR-MAX-SNEAKER-43">43</a>' in html
    assert "The drop." in html and "€149.00" in html
    assert [c.name for c in page.context["breadcrumbs"]] == ["Shoes", "Sneakers"]
    sold_out = client.get(reverse("product", args=["AIR-MAX-SNEAKER-42"])).content.decode()
    assert "Sold out" in sold_out and 'data-add-for="AIR-MAX-SNEAKER-42" disabled' in sold_out


def test_the_catalog_pages_through_products_keeping_the_filters(client, make_variant):
    for n in range(30):
        make_variant(sku=f"POSTER-{n:02d}", name=f"Poster {n:02d}", price="9.00", stock=1)

    first = client.get(reverse("catalog"), {"q": "poster", "sort": "name"})
    second = client.get(reverse("catalog"), {"q": "poster", "sort": "name", "page": 2})

    assert len(names(first)) == 24 and names(second) == [f"Poster {n}" for n in range(24, 30)]
    assert 'href="?q=poster&amp;sort=name&amp;page=2"' in first.content.decode()
    # A page that is not there is a 404, as the API answers it, not another page shown quietly.
    for missing in ["3", "999", "0", "x", "²", "1" * 5000, ""]:
        assert client.get(reverse("catalog"), {"q": "poster", "page": missing}).status_code == 404, missing
    assert client.get(reverse("catalog"), {"q": "nothing matches this"}).status_code == 200  # page 1, empty


def test_filters_and_sorting_on_the_catalog_page(client, drop):
    catalog = reverse("catalog")
    assert names(client.get(catalog)) == ["Air Max sneaker", "Logo mug", "Navy cap"]
    assert names(client.get(catalog, {"in_stock": "on"})) == ["Air Max sneaker", "Navy cap"]
    assert names(client.get(catalog, {"price_min": "20", "price_max": "100"})) == ["Navy cap"]
    assert names(client.get(catalog, {"sort": "price"})) == ["Logo mug", "Navy cap", "Air Max sneaker"]
    assert names(client.get(catalog, {"sort": "-price"})) == ["Air Max sneaker", "Navy cap", "Logo mug"]
    Product.objects.filter(name="Logo mug").update(created_at=timezone.now() + timedelta(days=1))
    assert names(client.get(catalog, {"sort": "newest"}))[0] == "Logo mug"
    size_42 = drop["sizes"][1]
    assert names(client.get(catalog, {"value": [size_42.pk]})) == ["Air Max sneaker"]
    assert names(client.get(catalog, {"value": [size_42.pk], "in_stock": "on"})) == []  # 42 is sold out
    assert names(client.get(catalog, {"q": "sneak"})) == ["Air Max sneaker"]  # the start of a word
    assert names(client.get(catalog, {"q": "cap-n"})) == ["Navy cap"]  # the start of a SKU
    assert names(client.get(catalog, {"price_min": "-5", "sort": "bogus"})) == names(client.get(catalog))
    assert names(client.get(catalog, {"price_min": "-5", "in_stock": "on"})) == ["Air Max sneaker", "Navy cap"]


def explain(queryset) -> list[dict]:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def test_the_search_uses_the_fulltext_index_on_names_and_the_sku_index_not_a_scan(make_variant):
    for n in range(50):
        make_variant(sku=f"ITEM-{n:03d}", name=f"Item number {n}")
    make_variant(sku="SNEAKER-LTD", name="Limited sneaker")

    by_name, by_sku = (explain(queryset) for queryset in product_search_queries("sneak"))

    assert [(row["type"], row["key"]) for row in by_name] == [("fulltext", "product_name_fulltext")]
    assert [row["type"] for row in by_sku if row["table"] == "shop_productvariant"] == ["range"]
    assert {row["key"] for row in by_sku if row["table"] == "shop_productvariant"} == {"sku"}
    sneaker = Product.objects.get(name="Limited sneaker").pk
    assert product_ids_matching("sneak") == product_ids_matching("SNEAKER-L") == [sneaker]
    assert product_ids_matching("limited sneakers!") == []  # every word must match


def test_the_api_lists_variants_with_the_same_filters_paginated(api_client, drop):
    def skus(**query):
        response = api_client.get("/api/products/", query)
        assert response.status_code == 200, response.json()
        return [row["sku"] for row in response.json()["results"]]

    assert skus(category="shoes") == ["AIR-MAX-SNEAKER-41", "AIR-MAX-SNEAKER-42", "AIR-MAX-SNEAKER-43"]
    assert skus(category="shoes", in_stock="true") == ["AIR-MAX-SNEAKER-41", "AIR-MAX-SNEAKER-43"]
    assert skus(option="Size:42") == ["AIR-MAX-SNEAKER-42"]
    assert skus(option=["size:41", "Size:43"]) == ["AIR-MAX-SNEAKER-41", "AIR-MAX-SNEAKER-43"]
    assert skus(price_min="10", price_max="25") == ["CAP-NAVY", "MUG-LOGO"]
    assert skus(search="sneak", ordering="-sku") == ["AIR-MAX-SNEAKER-43", "AIR-MAX-SNEAKER-42", "AIR-MAX-SNEAKER-41"]
    row = api_client.get("/api/products/AIR-MAX-SNEAKER-42/").json()
    assert row["options"] == {"Size": "42"} and row["product"]["category"] == "sneakers" and row["sold_out"]
    for bad in [{"category": "nope"}, {"option": "Size"}, {"option": "Colour:Pink"}, {"price_min": "-1"}]:
        response = api_client.get("/api/products/", bad)
        assert response.status_code == 400 and response.json()["code"] == "invalid_input"
    page = api_client.get("/api/products/", {"page_size": 2}).json()
    assert page["count"] == 5 and len(page["results"]) == 2 and page["next"]


def test_the_api_schema_documents_the_filters(api_client):
    schema = api_client.get("/api/schema/", {"format": "json"}).json()
    names = {p["name"] for p in schema["paths"]["/api/products/"]["get"]["parameters"]}
    assert {"search", "category", "in_stock", "price_min", "price_max", "option", "ordering", "page"} <= names


def test_staff_build_the_category_tree_in_the_admin_and_place_a_product_in_one(staff_admin):
    add = reverse("admin:shop_category_add")
    root = {
        "name": "Shoes",
        "slug": "shoes",
        "description": "",
        "treebeard_position": "sorted-child",
        "treebeard_ref_node": "",
    }
    response = staff_admin.post(add, root)
    assert response.status_code == 302, response.context["adminform"].form.errors
    shoes = Category.objects.get(slug="shoes")
    child = {**root, "name": "Sneakers", "slug": "sneakers", "treebeard_ref_node": shoes.pk}
    assert staff_admin.post(add, child).status_code == 302
    assert staff_admin.get(reverse("admin:shop_category_changelist")).status_code == 200
    product = Product.objects.create(name="Air Max")
    form = {"name": "Air Max", "description": "", "category": Category.objects.get(slug="sneakers").pk}
    form.update({"images-TOTAL_FORMS": "0", "images-INITIAL_FORMS": "0", "_save": "Save"})

    assert staff_admin.post(reverse("admin:shop_product_change", args=[product.pk]), form).status_code == 302
    product.refresh_from_db()
    assert [c.slug for c in Category.objects.get_ancestors(product.category)] == ["shoes"]


def test_the_catalog_page_costs_the_same_queries_for_three_products_or_thirty(client, drop, make_variant):
    def queries_for_the_catalog() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("catalog")).status_code == 200
        return len(queries)

    few = queries_for_the_catalog()
    for n in range(27):
        make_variant(sku=f"POSTER-{n:02d}", name=f"Poster {n:02d}", price="9.00", stock=1)
    assert queries_for_the_catalog() == few
