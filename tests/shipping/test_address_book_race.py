"""A customer's first addresses, added at once from several processes (two tabs, the app and the site):
each is kept, exactly one is the default for shipping and one for billing, and no request fails."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from shipping.models import AddressBookEntry
from tests.conftest import ADDRESS_DE, token_for
from tests.race import run_parallel, wait_for_peers

ROUNDS, AT_ONCE = 6, 4


def _add_first_address(*, user_id: int, via: str) -> int:
    user = get_user_model().objects.get(pk=user_id)
    if via == "api":
        client = APIClient(raise_request_exception=False)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
        send = lambda: client.post("/api/accounts/addresses/", {"address": ADDRESS_DE}, format="json")  # noqa: E731
    else:
        client = Client(raise_request_exception=False)
        client.force_login(user)
        fields = {f"address-{field}": value for field, value in ADDRESS_DE.items()}
        send = lambda: client.post("/accounts/addresses/new/", fields)  # noqa: E731
    wait_for_peers()
    return send().status_code


@pytest.mark.django_db(transaction=True)
def test_first_addresses_added_at_once_leave_one_default_and_no_error(django_user_model):
    users = [django_user_model.objects.create_user(f"buyer{n}", f"buyer{n}@example.com", "pw") for n in range(ROUNDS)]
    jobs = [{"user_id": user.pk, "via": ("api", "page")[n % 2]} for user in users for n in range(AT_ONCE)]

    statuses = run_parallel(_add_first_address, jobs, processes=AT_ONCE, barrier=True)

    assert sorted(set(statuses)) == [201, 302], statuses
    for user in users:
        entries = list(AddressBookEntry.objects.filter(user=user))
        assert len(entries) == AT_ONCE
        assert [e.is_default_shipping for e in entries].count(True) == 1, user
        assert [e.is_default_billing for e in entries].count(True) == 1, user
