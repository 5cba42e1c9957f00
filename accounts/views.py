"""Account pages: sign up, verify the email, ask for a new link, and the account page with the address
book and the order history. Thin: a form, one service call, a page."""

from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from accounts.forms import ResendForm, SignupForm, VerifyForm
from accounts.services import (
    Email,
    account_email_request,
    account_signup,
    account_verification_check,
    account_verify,
    account_verify_by_reset,
)
from core.errors import DomainError
from core.throttling import LoginThrottle, login_throttled_page
from orders.selectors import order_list_for_customer
from shipping.forms import AddressForm
from shipping.selectors import address_book_get, address_book_list
from shipping.services import address_book_add, address_book_remove, address_book_update


@sensitive_post_parameters("password", "password_again")
def signup(request):
    """Sign up; the same page follows whether the email has an account (its owner is emailed instead)."""
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            account_signup(username=data["username"], email=data["email"], password=data["password"])
        except DomainError as exc:
            _form_errors(form, exc)
        else:
            return render(request, "accounts/signup_done.html", {"email": data["email"]})
    return render(request, "accounts/signup.html", {"form": form})


@sensitive_post_parameters("password")
def verify(request, token: str):
    """The link of the verification email asks for the account's password: link and password together
    verify the email and log in, once (``accounts.services.account_verify``). Opening it changes nothing."""
    try:
        account = account_verification_check(token=token)
    except DomainError as exc:
        return render(request, "accounts/verify_failed.html", {"error": exc}, status=exc.status_code)
    form = VerifyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        throttle = LoginThrottle(request, username=account.user.username)
        if not throttle.attempt():
            return login_throttled_page(request, throttle)
        try:
            account = account_verify(token=token, password=form.cleaned_data["password"])
        except DomainError as exc:
            if exc.status_code != 400:
                return render(request, "accounts/verify_failed.html", {"error": exc}, status=exc.status_code)
            _form_errors(form, exc)
        else:
            throttle.give_back()  # a login that worked is not a guess
            login(request, account.user, backend="accounts.backends.EmailOrUsernameBackend")
            messages.success(request, "Your email address is confirmed. Welcome!")
            return redirect("account")
    return render(request, "accounts/verify.html", {"form": form, "account": account})


def verify_resend(request):
    form = ResendForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        account_email_request(kind=Email.VERIFY_AGAIN, email=form.cleaned_data["email"])
        messages.info(request, "If an account waits for that address to be confirmed, a new link is on its way.")
        return redirect("login")
    return render(request, "accounts/verify_resend.html", {"form": form})


class ResetConfirmView(auth_views.PasswordResetConfirmView):
    """Django's page to choose a new password from a reset link; the link proves the mailbox, so an
    account waiting to prove its email is verified with the password chosen here."""

    def form_valid(self, form):
        response = super().form_valid(form)
        account_verify_by_reset(user=form.user)
        return response


@login_required
def account(request):
    context = {
        "addresses": address_book_list(user=request.user),
        "orders": order_list_for_customer(customer=request.user)[:10],
        "form": AddressForm(prefix="new"),
    }
    return render(request, "accounts/account.html", context)


class DefaultsForm(forms.Form):
    default_shipping = forms.BooleanField(label="My default shipping address", required=False)
    default_billing = forms.BooleanField(label="My default billing address", required=False)


@login_required
def address_edit(request, pk: int | None = None):
    """Add an address to the book (no ``pk``) or change one of the user's own."""
    entry = None
    if pk is not None:
        entry = address_book_get(user=request.user, pk=pk)
        if entry is None:
            raise Http404("No such address.")
    data = request.POST if request.method == "POST" else None
    form = AddressForm(data, prefix="address", initial=entry.address if entry else {})
    defaults = DefaultsForm(data, initial={"default_shipping": getattr(entry, "is_default_shipping", False),
                                           "default_billing": getattr(entry, "is_default_billing", False)})  # fmt: skip
    if data is not None and form.is_valid() and defaults.is_valid():
        try:
            if entry is None:
                address_book_add(user=request.user, address=form.cleaned_data, **defaults.cleaned_data)
            else:
                address_book_update(entry=entry, address=form.cleaned_data, **defaults.cleaned_data)
        except DomainError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, "Address saved.")
            return redirect("account")
    return render(request, "accounts/address_form.html", {"form": form, "defaults": defaults, "entry": entry})


@login_required
@require_POST
def address_delete(request, pk: int):
    entry = address_book_get(user=request.user, pk=pk)
    if entry is None:
        raise Http404("No such address.")
    address_book_remove(entry=entry)
    messages.success(request, "Address removed.")
    return redirect("account")


def _form_errors(form, exc: DomainError) -> None:
    fields = exc.payload.get("fields") or {}
    for field, message in fields.items():
        form.add_error(field if field in form.fields else None, message)
    if not fields:
        form.add_error(None, exc.explain())
