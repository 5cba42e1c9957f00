"""Customer accounts on the site: sign-up with a verification link that expires and can be sent again,
login by username or email, password reset through Django's token views, the address book that
checkout uses, and guest orders claimed once the email is proven. Emails go through a real SMTP server."""

import re
import time
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Account
from orders.models import Order
from orders.services import order_place
from shipping.models import AddressBookEntry
from tests.accounts.conftest import PASSWORD
from tests.conftest import ADDRESS_DE, ADDRESS_US
from tests.orders.test_pages import add_to_cart
from tests.smtp import text_of

pytestmark = pytest.mark.django_db

User = get_user_model()


def sign_up(client, username="ann", email="Ann@Example.com", password=PASSWORD):
    return client.post(
        "/accounts/signup/",
        {"username": username, "email": email, "password": password, "password_again": password},
    )


def link_in(message, path: str) -> str:
    """The shop's link to ``path`` in an email, as a path the test client can open."""
    return re.search(r"https?://[^/\s]+(" + re.escape(path) + r"\S+)", text_of(message)).group(1)


def log_in(client, username: str, password: str = PASSWORD):
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_sign_up_verify_by_the_emailed_link_then_log_in_by_username_or_email(client, inbox):
    page = sign_up(client)

    assert "We sent a link to" in page.content.decode()
    user = User.objects.get(username="ann")
    assert not user.is_active and Account.objects.get(user=user).email == "ann@example.com"
    refused = log_in(client, "ann")
    assert refused.status_code == 200 and "your email address is not confirmed yet" in refused.content.decode()
    wrong = log_in(client, "ann", "wrong-password")
    assert refused.context["form"].errors == wrong.context["form"].errors  # the password told nothing
    [email] = inbox.take()
    assert email["To"] == "ann@example.com" and email["Subject"] == "Confirm your email address"

    link = link_in(email, "/accounts/verify/")
    asked = client.get(link)
    verified = client.post(link, {"password": PASSWORD}, follow=True)

    assert 'name="password"' in asked.content.decode()  # opening the link changes nothing: the password does
    assert "Your email address is confirmed" in verified.content.decode()
    assert verified.wsgi_request.user.username == "ann"  # logged in by the link
    assert User.objects.get(username="ann").is_active and Account.objects.get(user=user).is_verified
    for name in ("ann", "ANN@example.com"):
        other = Client()
        assert log_in(other, name).status_code == 302, name
        assert other.get("/accounts/").status_code == 200
    assert client.get(link).status_code == 410  # used: it verifies and logs in once


def test_an_expired_link_is_refused_and_a_new_one_sent_on_request(client, inbox, settings):
    sign_up(client)
    [first] = inbox.take()
    later = time.time() + settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS + 60

    with mock.patch("django.core.signing.time.time", return_value=later):
        expired = client.get(link_in(first, "/accounts/verify/"))
    assert expired.status_code == 410 and "expired" in expired.content.decode()
    assert not User.objects.get(username="ann").is_active

    client.post("/accounts/verify/resend/", {"email": "nobody@example.com"})
    assert inbox.take() == []  # no account waits for that address: nothing sent, the same answer
    asked = client.post("/accounts/verify/resend/", {"email": "ANN@example.com"}, follow=True)
    assert "a new link is on its way" in asked.content.decode()
    [second] = inbox.take()
    assert client.post(link_in(second, "/accounts/verify/"), {"password": PASSWORD}).status_code == 302
    assert User.objects.get(username="ann").is_active
    assert client.get("/accounts/verify/forged-token/").status_code == 400


@pytest.mark.parametrize(
    "username, email, password, error",
    [
        ("ANN", "other@example.com", PASSWORD, "This username is taken"),
        ("bea", "bea@example.com", "12345678", "This password is"),
        ("bea", "not-an-email", PASSWORD, "valid email"),
        ("bea", "bea@example.com", "bea@example.com", "too similar"),
    ],
)
def test_a_sign_up_that_cannot_be_is_refused_and_says_why(client, inbox, username, email, password, error):
    sign_up(client)

    page = sign_up(Client(), username=username, email=email, password=password)

    assert page.status_code == 200 and error in page.content.decode()
    assert User.objects.count() == 1


def test_a_password_is_reset_through_the_emailed_link_once(client, inbox):
    sign_up(client)
    client.post(link_in(inbox.take()[0], "/accounts/verify/"), {"password": PASSWORD})
    browser = Client()

    sent = browser.post("/accounts/password-reset/", {"email": "ann@example.com"}, follow=True)
    browser.post("/accounts/password-reset/", {"email": "nobody@example.com"})

    assert "a link to choose a new password is on its way" in sent.content.decode()
    [email] = inbox.take()  # none for an address without an account
    link = link_in(email, "/accounts/reset/")
    form = browser.get(link, follow=True)
    assert 'name="new_password1"' in form.content.decode()
    done = browser.post(
        form.redirect_chain[-1][0], {"new_password1": "another-passphrase-7", "new_password2": "another-passphrase-7"}
    )
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    assert log_in(Client(), "ann", "another-passphrase-7").status_code == 302
    assert log_in(Client(), "ann").status_code == 200  # the old password no longer works
    again = Client().get(link, follow=True).content.decode()
    assert 'data-testid="reset-invalid"' in again


def test_verifying_claims_that_emails_guest_orders_and_only_those(client, inbox, make_variant):
    make_variant(sku="MUG", stock=10)
    mine = order_place(email="Ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="a")
    theirs = order_place(email="bob@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="b")
    buyer_before, updated_before = mine.buyer, Order.objects.get(pk=mine.pk).updated_at
    sign_up(client)
    assert Order.objects.get(pk=mine.pk).customer is None  # not before the email is proven

    client.post(link_in(inbox.take()[0], "/accounts/verify/"), {"password": PASSWORD})

    user = User.objects.get(username="ann")
    claimed = Order.objects.get(pk=mine.pk)
    assert claimed.customer == user and claimed.buyer == buyer_before and claimed.updated_at == updated_before
    assert Order.objects.get(pk=theirs.pk).customer is None
    history = client.get("/orders/").content.decode()
    assert mine.number in history and theirs.number not in history
    assert mine.number in client.get("/accounts/").content.decode()
    assert client.get(f"/orders/{mine.number}/").status_code == 200


def test_the_address_book_is_kept_on_the_account_page_and_checkout_starts_from_it(
    customer, client, make_variant, shipping_rules, bob
):
    make_variant(sku="LAMP", stock=10, price="30.00", requires_shipping=True, weight_grams=900)
    client.force_login(customer)
    fields = {f"address-{field}": value for field, value in ADDRESS_DE.items()}
    assert client.post("/accounts/addresses/new/", fields).status_code == 302
    billing = {f"address-{field}": value for field, value in ADDRESS_US.items()} | {"default_billing": "on"}
    assert client.post("/accounts/addresses/new/", billing).status_code == 302
    bad = client.post("/accounts/addresses/new/", {"address-full_name": "X", "address-country": "DE"})
    assert bad.status_code == 200 and AddressBookEntry.objects.count() == 2
    home, office = AddressBookEntry.objects.order_by("pk")
    assert (home.is_default_shipping, home.is_default_billing) == (True, False)
    assert (office.is_default_shipping, office.is_default_billing) == (False, True)
    add_to_cart(client, "LAMP", 1)

    page = client.get("/checkout/").content.decode()

    assert f'value="{ADDRESS_DE["line1"]}"' in page  # the default shipping address
    assert f'value="{ADDRESS_US["line1"]}"' in page  # the default billing one, shown as it differs
    picked = client.get(f"/checkout/?address={office.pk}").content.decode()
    assert 'name="shipping-line1"' in picked and f'value="{ADDRESS_US["line1"]}"' in picked
    account = client.get("/accounts/").content.decode()
    assert "Default shipping address" in account and "Default billing address" in account
    other = Client()
    other.force_login(bob)
    assert other.get(f"/accounts/addresses/{home.pk}/").status_code == 404
    assert other.post(f"/accounts/addresses/{home.pk}/delete/").status_code == 404
    assert client.post(f"/accounts/addresses/{home.pk}/delete/").status_code == 302
    assert AddressBookEntry.objects.get().is_default_shipping  # the default moved to the one left


def test_sign_ups_count_against_the_login_throttle(client, settings, inbox):
    settings.LOGIN_THROTTLE_RATE = "3/minute"
    answers = [sign_up(client, username=f"u{n}", email=f"u{n}@example.com").status_code for n in range(5)]
    assert answers == [200, 200, 200, 429, 429] and User.objects.count() == 3
