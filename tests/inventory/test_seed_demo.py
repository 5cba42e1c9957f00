from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from shop.models import Product
from tests.conftest import assert_books_balance

pytestmark = pytest.mark.django_db


def run(*args, **env):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_seed_demo_is_idempotent_and_prints_a_generated_password(monkeypatch):
    monkeypatch.delenv("DEMO_STAFF_PASSWORD", raising=False)
    first = run("seed_demo")
    products = {p.sku: p.stock.on_hand for p in Product.objects.select_related("stock")}

    second = run("seed_demo")

    assert "7 created" in first and "Staff user: staff / password: " in first
    assert "0 created, 7 already there" in second and "password unchanged" in second
    assert {p.sku: p.stock.on_hand for p in Product.objects.select_related("stock")} == products
    staff = get_user_model().objects.get(username="staff")
    password = first.split("password: ")[1].split()[0]
    assert staff.is_staff and staff.check_password(password)
    assert staff.has_perm("inventory.change_stock")
    assert_books_balance(*Product.objects.all())


def test_seed_demo_takes_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("DEMO_STAFF_PASSWORD", "correct-horse-battery")
    output = run("seed_demo")
    assert "correct-horse-battery" not in output
    assert get_user_model().objects.get(username="staff").check_password("correct-horse-battery")
