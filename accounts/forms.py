from django import forms
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm

from accounts.services import Email, account_email_request


class LoginForm(AuthenticationForm):
    """Django's login form, by username or email. An account whose email is not proven yet does not log
    in, and is answered as a wrong password is: told apart, a sign-up's own password would show whether
    its email was free (a sign-up with a taken email makes no account)."""

    username = forms.CharField(label="Username or email", max_length=254)
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Wrong username, email or password. Or your email address is not confirmed yet: "
        "follow the link we emailed you, or ask for a new one.",
    }


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
