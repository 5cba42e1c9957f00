import logging
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm
from django.core.exceptions import ValidationError

from accounts.models import Account

logger = logging.getLogger(__name__)


class LoginForm(AuthenticationForm):
    """Django's login form, by username or email; an account that signed up but has not verified its
    email is told so (only once its password is right, so this tells nobody else it exists)."""

    username = forms.CharField(label="Username or email", max_length=254)
    error_messages = {**AuthenticationForm.error_messages, "invalid_login": "Wrong username, email or password."}

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if self._unverified_with_this_password():
                raise ValidationError(
                    "Confirm your email address first: follow the link we emailed you, or ask for a new one.",
                    code="unverified",
                ) from None
            raise

    def _unverified_with_this_password(self) -> bool:
        name, password = self.cleaned_data.get("username", ""), self.cleaned_data.get("password", "")
        users = get_user_model()._default_manager.filter(is_active=False)
        user = (users.filter(email__iexact=name) if "@" in name else users.filter(username=name)).first()
        return (
            user is not None
            and Account.objects.filter(user=user, email_verified_at=None).exists()
            and user.check_password(password)
        )


class SignupForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(max_length=254)
    password = forms.CharField(widget=forms.PasswordInput, strip=False)
    password_again = forms.CharField(label="Password again", widget=forms.PasswordInput, strip=False)

    def clean(self):
        data = super().clean()
        if data.get("password") and data.get("password") != data.get("password_again"):
            self.add_error("password_again", "The two passwords differ.")
        return data


class ResendForm(forms.Form):
    email = forms.EmailField(max_length=254)


class ResetForm(PasswordResetForm):
    """Django's password reset request; a mail server that refuses is logged, and the page says the same
    as ever (a link is on its way if the address has an account), so the buyer may ask again."""

    def send_mail(self, *args, **kwargs):
        try:
            super().send_mail(*args, **kwargs)
        except Exception:
            logger.exception("a password reset email could not be sent")


def reset_link_options() -> dict:
    """Where reset links point: the shop's public address (``SHOP_URL``), whatever host the request named."""
    shop = urlsplit(settings.SHOP_URL)
    return {"domain_override": shop.netloc, "use_https": shop.scheme == "https"}
