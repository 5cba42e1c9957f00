"""Option values staff add in the admin keep the order they were entered in (S, M, L; not "L, M, S")."""

import re

import pytest

from shop.models import Option, OptionValue

pytestmark = pytest.mark.django_db


def form_fields(page: str) -> dict[str, str]:
    """Every text or number input of an admin form with the value the page shows, as a browser posts it."""
    fields = {}
    for tag in re.findall(r"<input[^>]*>", page):
        name, value = re.search(r'name="([^"]+)"', tag), re.search(r'value="([^"]*)"', tag)
        if name and 'type="checkbox"' not in tag and 'type="submit"' not in tag:
            fields[name.group(1)] = value.group(1) if value else ""
    return fields


def save(client, url: str, **values) -> None:
    fields = form_fields(client.get(url).content.decode()) | values
    response = client.post(url, fields)
    assert response.status_code == 302, response.content.decode()[:3000]


def test_values_entered_one_after_another_get_the_next_positions(staff_admin):
    save(staff_admin, "/admin/shop/option/add/", name="Size", **{
        "values-0-value": "S", "values-1-value": "M", "values-2-value": "L",
    })  # fmt: skip
    size = Option.objects.get(name="Size")
    save(staff_admin, f"/admin/shop/option/{size.pk}/change/", **{"values-3-value": "XL"})

    assert [value.value for value in OptionValue.objects.filter(option=size)] == ["S", "M", "L", "XL"]
    assert [value.position for value in OptionValue.objects.filter(option=size)] == [0, 1, 2, 3]


def test_a_value_whose_position_is_cleared_goes_after_the_others(staff_admin):
    size = Option.objects.create(name="Size")
    for position, value in enumerate(["S", "M", "L"]):
        OptionValue.objects.create(option=size, value=value, position=position)

    save(staff_admin, f"/admin/shop/option/{size.pk}/change/", **{"values-0-position": ""})

    assert [value.value for value in OptionValue.objects.filter(option=size)] == ["M", "L", "S"]
