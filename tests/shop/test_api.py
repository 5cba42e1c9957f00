import pytest

from shop.models import ProductVariant

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(make_variant):
    make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    make_variant(sku="TEE", name="Black tee", stock=0, price="19.00")
    make_variant(sku="CAP", name="Navy cap", stock=3, price="22.00")
    make_variant(sku="OLD", name="Old mug", stock=5, is_active=False)
    make_variant(sku="GONE", name="Gone mug", stock=5).delete()


def skus(response):
    return [p["sku"] for p in response.json()["results"]]


def test_the_catalog_lists_variants_for_sale_with_their_stock(api_client, catalog):
    response = api_client.get("/api/products/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3 and skus(response) == ["CAP", "MUG", "TEE"]
    mug = ProductVariant.objects.get(sku="MUG")
    assert body["results"][1] == {
        "sku": "MUG",
        "name": "Logo mug",
        "product": {"id": mug.product_id, "name": "Logo mug", "category": None},
        "options": {},
        "description": "",
        "price": "12.50",
        "price_now": "12.50",
        "on_sale": False,
        "sale_price": None,
        "sale_price_from": None,
        "sale_price_until": None,
        "on_hand": 10,
        "reserved": 0,
        "available": 10,
        "sold_out": False,
        "sale_open": True,
        "sale_starts_at": None,
        "max_per_customer": None,
    }


@pytest.mark.parametrize(
    "query, expected",
    [
        ("sku=mug", ["MUG"]),
        ("search=MUG", ["MUG"]),
        ("in_stock=true", ["CAP", "MUG"]),
        ("in_stock=false", ["TEE"]),
        ("ordering=-price", ["CAP", "TEE", "MUG"]),
        ("ordering=-available", ["MUG", "CAP", "TEE"]),
        ("page_size=2&page=2", ["TEE"]),
    ],
)
def test_filters_ordering_and_pages(api_client, catalog, query, expected):
    assert skus(api_client.get(f"/api/products/?{query}")) == expected


@pytest.mark.parametrize(
    "query",
    ["in_stock=maybe", "ordering=secret", "sku=" + "X" * 65, "page_size=%C2%B2", "page_size=0", "page_size=1" * 9],
)
def test_bad_filters_are_refused(api_client, catalog, query):
    response = api_client.get(f"/api/products/?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input" and response.json()["fields"]


def test_a_page_past_the_end_is_not_found(api_client, catalog):
    response = api_client.get("/api/products/?page=9")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_variant_detail_and_unknown_inactive_or_deleted_skus(api_client, catalog):
    assert api_client.get("/api/products/mug/").json()["available"] == 10
    for sku in ("NOPE", "OLD", "GONE"):
        response = api_client.get(f"/api/products/{sku}/")
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "detail": "No product for sale with this SKU.", "fields": {}}


def test_the_catalog_ignores_a_stale_token(api_client, catalog):
    api_client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert api_client.get("/api/products/").status_code == 200
    assert api_client.get("/api/products/MUG/").status_code == 200


def test_staff_set_the_limit_and_the_sale_start_and_everyone_sees_them(api_client, staff_client, catalog):
    response = staff_client.patch(
        "/api/products/mug/", {"max_per_customer": 2, "sale_starts_at": "2099-01-01T09:00:00Z"}, format="json"
    )
    assert response.status_code == 200
    shown = api_client.get("/api/products/MUG/").json()
    assert (shown["max_per_customer"], shown["sale_starts_at"], shown["sale_open"]) == (
        2,
        "2099-01-01T09:00:00Z",
        False,
    )

    response = staff_client.patch("/api/products/MUG/", {"sale_starts_at": None}, format="json")
    assert (response.json()["sale_open"], response.json()["max_per_customer"]) == (True, 2)  # the limit stays
    assert api_client.get("/api/products/TEE/").json()["sold_out"] is True


def test_staff_put_a_variant_on_sale_for_a_window_and_everyone_sees_the_price_in_force(
    api_client, staff_client, catalog
):
    later = {
        "sale_price": "9.99",
        "sale_price_from": "2099-01-01T09:00:00Z",
        "sale_price_until": "2099-01-02T09:00:00Z",
    }
    response = staff_client.patch("/api/products/mug/", later, format="json")
    assert response.status_code == 200
    shown = api_client.get("/api/products/MUG/").json()
    assert (shown["price_now"], shown["on_sale"], shown["sale_price"]) == ("12.50", False, "9.99")  # not yet

    staff_client.patch("/api/products/mug/", {"sale_price_from": None}, format="json")  # from now on
    shown = api_client.get("/api/products/MUG/").json()
    assert (shown["price"], shown["price_now"], shown["on_sale"]) == ("12.50", "9.99", True)
    assert shown["sale_price_until"] == "2099-01-02T09:00:00Z"
    assert [p["price_now"] for p in api_client.get("/api/products/").json()["results"]] == ["22.00", "9.99", "19.00"]
    staff_client.patch("/api/products/CAP/", {"sale_price": "5.00"}, format="json")  # 22.00 -> 5.00
    assert skus(api_client.get("/api/products/?ordering=price")) == ["CAP", "MUG", "TEE"]  # by the price in force

    staff_client.patch("/api/products/mug/", {"sale_price": None, "sale_price_until": None}, format="json")
    assert api_client.get("/api/products/MUG/").json()["price_now"] == "12.50"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"max_per_customer": 0},
        {"max_per_customer": "2"},
        {"max_per_customer": 2.5},
        {"sale_starts_at": "soon"},
        {"sale_price": "-1.00"},
        {"sale_price": "cheap"},
        {"sale_price": "1" * 20},
        {"sale_price_until": "2099-01-01T09:00:00Z"},  # a window with no price
        {"sale_price": "5", "sale_price_from": "2099-01-02T00:00:00Z", "sale_price_until": "2099-01-01T00:00:00Z"},
    ],
)
def test_bad_sale_terms_are_400_and_change_nothing(staff_client, catalog, body):
    response = staff_client.patch("/api/products/MUG/", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_input"
    shown = staff_client.get("/api/products/MUG/").json()
    assert (shown["max_per_customer"], shown["sale_price"], shown["sale_price_until"]) == (None, None, None)


def test_only_staff_with_change_variant_edit_sale_terms(api_client, customer_client, staff_user, catalog):
    from tests.conftest import client_for

    assert api_client.patch("/api/products/MUG/", {"max_per_customer": 1}, format="json").status_code == 401
    assert customer_client.patch("/api/products/MUG/", {"max_per_customer": 1}, format="json").status_code == 403
    assert client_for(staff_user).patch("/api/products/MUG/", {"max_per_customer": 1}, format="json").status_code == 403
    assert (
        api_client.get("/api/products/MUG/", HTTP_AUTHORIZATION="Token stale").status_code == 200
    )  # reading is public
