"""Every paged list of the pages answers a page that is not there as the API does: 404, never another page."""

import pytest

from shop.models import Category

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("page", ["2", "999", "0", "x", "", "1" * 5000])
def test_my_orders_past_the_last_page_is_a_404(client, customer, page):
    client.force_login(customer)

    assert client.get("/orders/").status_code == 200  # page 1 of none
    assert client.get("/orders/", {"page": page}).status_code == 404


def test_a_category_past_its_last_page_is_a_404(client):
    Category.objects.add_root({"name": "Shoes", "slug": "shoes"})

    assert client.get("/categories/shoes/").status_code == 200
    assert client.get("/categories/shoes/", {"page": "999"}).status_code == 404
