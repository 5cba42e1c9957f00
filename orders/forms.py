"""The checkout's forms: a postal address (also the account's address book) and the checkout itself."""

from django import forms
from django_countries import countries
from django_countries.fields import LazyTypedChoiceField

from core.errors import InvalidInput
from core.money import money_format
from core.numbers import NumberInvalid, number_whole
from shipping.addresses import ADDRESS_FIELDS, address_clean, address_optional_fields
from vouchers.models import VOUCHER_CODE_MAX_LENGTH, voucher_code_normal


class AddressForm(forms.Form):
    """A postal address; the country's own rules (``shipping.addresses``) are shown beside each field."""

    full_name = forms.CharField(max_length=ADDRESS_FIELDS["full_name"], required=False)
    line1 = forms.CharField(label="Address", max_length=ADDRESS_FIELDS["line1"], required=False)
    line2 = forms.CharField(label="Address line 2", max_length=ADDRESS_FIELDS["line2"], required=False)
    city = forms.CharField(max_length=ADDRESS_FIELDS["city"], required=False)
    postal_code = forms.CharField(max_length=ADDRESS_FIELDS["postal_code"], required=False)
    region = forms.CharField(
        label="Region", max_length=ADDRESS_FIELDS["region"], required=False, help_text="State or province, if any."
    )
    country = LazyTypedChoiceField(
        choices=[("", "Choose a country")] + list(countries),
        required=False,
        error_messages={"invalid_choice": "Choose a country from the list."},  # as address_clean says it
    )
    phone = forms.CharField(max_length=ADDRESS_FIELDS["phone"], required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["country"].widget.attrs["data-refresh-on-change"] = ""

    def clean(self):
        try:
            return address_clean(self.cleaned_data)
        except InvalidInput as exc:
            for field, message in exc.payload["fields"].items():
                if field not in self.errors:  # a field's own error says it already (not also "required")
                    self.add_error(field or None, message)
            return self.cleaned_data

    @property
    def country_chosen(self) -> str | None:
        """The country on the form, checked or not: enough to quote shipping before the rest is filled in."""
        value = (self.data.get(self.add_prefix("country")) if self.is_bound else self.initial.get("country")) or ""
        return value.upper() if value.upper() in countries else None

    @property
    def optional_fields(self) -> frozenset[str]:
        """The fields the chosen country lets the address leave empty: the page labels them "if any"."""
        return address_optional_fields(self.country_chosen)


class CheckoutForm(forms.Form):
    email = forms.EmailField(required=False, max_length=254)
    # One key per checkout page, kept while its order may have been placed (orders.checkout).
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=64)
    billing_same = forms.BooleanField(label="Bill to the shipping address", required=False, initial=True)
    shipping_method = forms.TypedChoiceField(coerce=int, required=False, widget=forms.RadioSelect, empty_value=None)
    voucher = forms.CharField(label="Voucher code", required=False, max_length=VOUCHER_CODE_MAX_LENGTH)
    # The code the totals on the page include: an order is placed only at totals its buyer saw.
    voucher_shown = forms.CharField(widget=forms.HiddenInput, required=False, max_length=VOUCHER_CODE_MAX_LENGTH)

    def __init__(self, *args, offers=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.offers = offers
        self.fields["shipping_method"].choices = [
            (offer.id, f"{offer.name}: {money_format(offer.price)}") for offer in offers
        ]
        self.fields["shipping_method"].widget.attrs["data-refresh-on-change"] = ""
        self.fields["billing_same"].widget.attrs["data-refresh-on-change"] = ""

    def method_chosen(self) -> int | None:
        value = self.data.get("shipping_method") if self.is_bound else None
        try:
            return number_whole(value, low=1) if value else None
        except NumberInvalid:
            return None  # the form's own validation refuses it

    def voucher_chosen(self) -> str:
        """The code typed, in capitals ("" for none, or one too long to be a code)."""
        value = self.data.get("voucher", "") if self.is_bound else ""
        return (
            voucher_code_normal(value)
            if isinstance(value, str) and len(value.strip()) <= VOUCHER_CODE_MAX_LENGTH
            else ""
        )

    def for_page(
        self, *, key: str, email: str = "", method: int | None = None, voucher_shown: str = "", billing_same=True
    ) -> "CheckoutForm":
        """The form the next page shows: with its key, the email that key was submitted with (if kept),
        ``method`` ticked, the one the totals shown are for, the voucher they include, and whether the
        billing address is the shipping address."""
        if not self.is_bound:
            initial = {"idempotency_key": key, "shipping_method": method, "billing_same": billing_same}
            return CheckoutForm(initial=initial, offers=self.offers)
        self.data = self.data.copy()  # the errors found stay
        self.data["idempotency_key"] = key
        self.data["voucher_shown"] = voucher_shown
        if email:
            self.data["email"] = email
        if method is not None:
            self.data["shipping_method"] = str(method)
        return self
