"""The checkout's form (the address form is shipping's: ``shipping.forms``)."""

from django import forms

from core.money import money_format
from core.numbers import NumberInvalid, number_whole
from orders.models import Order
from vouchers.models import VOUCHER_CODE_MAX_LENGTH, voucher_code_normal


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
        for name in Order.BUYER_FIELDS:  # as their columns make them: label, help, length, optional
            self.fields[name] = Order._meta.get_field(name).formfield()
        self.offers = offers
        self.fields["shipping_method"].choices = [
            (offer.id, f"{offer.name}: {money_format(offer.price)}") for offer in offers
        ]
        self.fields["shipping_method"].widget.attrs["data-refresh-on-change"] = ""
        self.fields["billing_same"].widget.attrs["data-refresh-on-change"] = ""

    def given(self) -> dict[str, str]:
        """The buyer fields (``Order.BUYER_FIELDS``) as typed, for ``order_place``; of a valid form."""
        return {name: self.cleaned_data[name] for name in Order.BUYER_FIELDS}

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
