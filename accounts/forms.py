from django import forms
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm
from django.core.exceptions import ValidationError

from accounts.models import Account
from accounts.selectors import user_for_login
from accounts.services import Email, account_email_request


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
        user = user_for_login(self.cleaned_data.get("username", ""))
        return (
            user is not None
            and not user.is_active
            and Account.objects.filter(user=user, email_verified_at=None).exists()
            and user.check_password(self.cleaned_data.get("password", ""))
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


class VerifyForm(forms.Form):
    password = forms.CharField(label="Your password", widget=forms.PasswordInput, strip=False)


class ResetForm(PasswordResetForm):
    """Django's password reset request, handed to the worker (``accounts.emails``): the page answers at
    once and alike, whoever has the address; the worker finds the account and sends the link."""

    def save(self, *args, **kwargs):
        account_email_request(kind=Email.RESET, email=self.cleaned_data["email"])
