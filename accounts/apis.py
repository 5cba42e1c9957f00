"""The account API: sign up, verify the email, new links, password reset, and the address book.

Everything that guesses at accounts (sign-up, links, resets) counts against the login throttle, as the
login itself does. Thin: input checked by a serializer, one service call, the output serialized.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.tokens import default_token_generator
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.services import (
    Email,
    account_email_request,
    account_signup,
    account_verification_check,
    account_verify,
    account_verify_by_reset,
)
from core.api import CSRF_REFUSED, UNAUTHENTICATED, ErrorSerializer, StrictCharField
from core.errors import InvalidInput
from core.throttling import LoginThrottle
from shipping.selectors import address_book_get, address_book_list
from shipping.serializers import AddressSerializer
from shipping.services import address_book_add, address_book_remove, address_book_update

THROTTLED = OpenApiResponse(
    ErrorSerializer, description="throttled: too many attempts from this address or for this name"
)
SENT = OpenApiResponse(description="Accepted, no body: an email is on its way if the address has an account for it")
SIGNED_UP = OpenApiResponse(
    description="Accepted, no body, whether the email has an account or not: a new account's link is on its way, "
    "or the address's owner is told that someone tried (and how to log in or choose a password)"
)


def _attempt(request, name: str) -> LoginThrottle:
    """Count an attempt against the login throttle (this client, and ``name``), or refuse it with 429."""
    throttle = LoginThrottle(request, username=name if isinstance(name, str) else "")
    if not throttle.attempt():
        raise exceptions.Throttled(wait=throttle.wait())
    return throttle


class AccountOutputSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.CharField()
    email_verified = serializers.BooleanField(
        help_text="True once the link emailed at sign-up was followed (false for users made by staff)."
    )


def _account_output(user) -> dict:
    account = getattr(user, "account", None)  # staff and users made by hand have none
    verified = account is not None and account.is_verified
    return AccountOutputSerializer({"username": user.username, "email": user.email, "email_verified": verified}).data


class SignupApi(APIView):
    authentication_classes = []
    permission_classes = []

    class SignupInputSerializer(serializers.Serializer):
        username = StrictCharField(max_length=150)
        email = StrictCharField(max_length=254)
        password = StrictCharField(max_length=128, trim_whitespace=False)

    @extend_schema(
        operation_id="accounts_signup",
        request=SignupInputSerializer,
        description="Create an account; it logs in once the link emailed to it is followed with its password "
        "(or its token and password sent to accounts/verify/). The same answer whether the email has an "
        "account: its owner is emailed instead.",
        responses={
            202: SIGNED_UP,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input (fields), malformed_json"),
            409: OpenApiResponse(ErrorSerializer, description="username_taken"),
            429: THROTTLED,
        },
    )
    def post(self, request):
        data = self.SignupInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _attempt(request, data.validated_data["email"])
        account_signup(**data.validated_data)
        return Response(status=status.HTTP_202_ACCEPTED)


class VerifyApi(APIView):
    authentication_classes = []
    permission_classes = []

    class VerifyInputSerializer(serializers.Serializer):
        token = StrictCharField(max_length=500, help_text="The token of the emailed link: /accounts/verify/<token>/")
        password = StrictCharField(max_length=128, trim_whitespace=False, help_text="The password chosen at sign-up.")

    @extend_schema(
        operation_id="accounts_verify",
        request=VerifyInputSerializer,
        description="Prove the email with the link's token and the account's password: the account may log "
        "in, and the guest orders placed with that email become its orders. Once; never after the password "
        "changed. Whoever holds the mailbox but not the password resets the password instead (that verifies).",
        responses={
            200: AccountOutputSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="verification_invalid; invalid_input (fields.password: not the account's), malformed_json",
            ),
            410: OpenApiResponse(
                ErrorSerializer, description="verification_expired: ask for a new link; verification_used: log in"
            ),
            429: THROTTLED,
        },
    )
    def post(self, request):
        data = self.VerifyInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        throttle = _attempt(request, "")
        account = account_verification_check(token=data.validated_data["token"])
        throttle.give_back()  # counted again against the account: the password is the guess now
        throttle = _attempt(request, account.user.username)
        account = account_verify(token=data.validated_data["token"], password=data.validated_data["password"])
        throttle.give_back()  # a link and password that work are not a guess
        return Response(_account_output(account.user))


class EmailInputSerializer(serializers.Serializer):
    email = serializers.EmailField(max_length=254)


class VerifyResendApi(APIView):
    authentication_classes = []
    permission_classes = []

    @extend_schema(
        operation_id="accounts_verify_resend",
        request=EmailInputSerializer,
        description="Send a new verification link, if an account with this email waits for one (the answer "
        "is the same either way).",
        responses={202: SENT, 400: OpenApiResponse(ErrorSerializer, description="invalid_input"), 429: THROTTLED},
    )
    def post(self, request):
        data = EmailInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _attempt(request, data.validated_data["email"])
        account_email_request(kind=Email.VERIFY_AGAIN, email=data.validated_data["email"])
        return Response(status=status.HTTP_202_ACCEPTED)


class PasswordResetApi(APIView):
    authentication_classes = []
    permission_classes = []

    @extend_schema(
        operation_id="accounts_password_reset",
        request=EmailInputSerializer,
        description="Email a link to choose a new password, if the address has an account (the answer is the "
        "same either way). Its uid and token go to accounts/password-reset/confirm/; for an account waiting "
        "to prove its email, choosing the password proves it.",
        responses={202: SENT, 400: OpenApiResponse(ErrorSerializer, description="invalid_input"), 429: THROTTLED},
    )
    def post(self, request):
        data = EmailInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _attempt(request, data.validated_data["email"])
        account_email_request(kind=Email.RESET, email=data.validated_data["email"])
        return Response(status=status.HTTP_202_ACCEPTED)


class PasswordResetConfirmApi(APIView):
    authentication_classes = []
    permission_classes = []

    class ResetConfirmInputSerializer(serializers.Serializer):
        uid = StrictCharField(max_length=64)
        token = StrictCharField(max_length=100)
        new_password = StrictCharField(max_length=128, trim_whitespace=False)

    @extend_schema(
        operation_id="accounts_password_reset_confirm",
        request=ResetConfirmInputSerializer,
        description="Set a new password with the uid and token of a reset link (Django's, valid for "
        "PASSWORD_RESET_TIMEOUT; once). The account's API tokens stop working; an account waiting to prove "
        "its email is verified (the link proved it).",
        responses={
            200: AccountOutputSerializer,
            400: OpenApiResponse(
                ErrorSerializer, description="invalid_input: a link not valid (token), a weak password"
            ),
            429: THROTTLED,
        },
    )
    def post(self, request):
        data = self.ResetConfirmInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        _attempt(request, "")
        user = _user_of_uid(data.validated_data["uid"])
        if user is None or not default_token_generator.check_token(user, data.validated_data["token"]):
            raise InvalidInput(
                fields={"token": "This reset link is not valid, or was used or expired. Ask for a new one."}
            )
        form = SetPasswordForm(
            user,
            data={
                "new_password1": data.validated_data["new_password"],
                "new_password2": data.validated_data["new_password"],
            },
        )
        if not form.is_valid():
            raise InvalidInput(fields={"new_password": " ".join(form.errors.get("new_password2", []))})
        form.save()
        account_verify_by_reset(user=user)
        return Response(_account_output(user))


def _user_of_uid(uid: str):
    try:
        pk = force_str(urlsafe_base64_decode(uid))
        return get_user_model()._default_manager.filter(pk=int(pk)).first()
    except (TypeError, ValueError, OverflowError):
        return None


class MeApi(APIView):
    @extend_schema(operation_id="accounts_me", responses={200: AccountOutputSerializer, 401: UNAUTHENTICATED})
    def get(self, request):
        return Response(_account_output(request.user))


class AddressBookEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    address = AddressSerializer()
    is_default_shipping = serializers.BooleanField(required=False, help_text="Checkout's shipping address.")
    is_default_billing = serializers.BooleanField(required=False, help_text="Checkout's billing address.")


class AddressBookEntryUpdateSerializer(AddressBookEntrySerializer):
    address = AddressSerializer(required=False)


ADDRESS_REFUSED = OpenApiResponse(ErrorSerializer, description="invalid_input (fields of the address), malformed_json")
NO_SUCH_ADDRESS = OpenApiResponse(ErrorSerializer, description="not_found: no such address of yours")


class AddressListApi(APIView):
    @extend_schema(
        operation_id="accounts_addresses_list",
        responses={200: AddressBookEntrySerializer(many=True), 401: UNAUTHENTICATED},
    )
    def get(self, request):
        return Response(AddressBookEntrySerializer(address_book_list(user=request.user), many=True).data)

    @extend_schema(
        operation_id="accounts_addresses_create",
        request=AddressBookEntrySerializer,
        description="Keep an address for checkout; the first one is the default for shipping and billing.",
        responses={201: AddressBookEntrySerializer, 400: ADDRESS_REFUSED, 401: UNAUTHENTICATED, 403: CSRF_REFUSED},
    )
    def post(self, request):
        data = AddressBookEntrySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = address_book_add(
            user=request.user,
            address=data.validated_data["address"],
            default_shipping=data.validated_data.get("is_default_shipping", False),
            default_billing=data.validated_data.get("is_default_billing", False),
        )
        return Response(AddressBookEntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class AddressDetailApi(APIView):
    def _entry(self, request, address_id: int):
        entry = address_book_get(user=request.user, pk=address_id)
        if entry is None:
            raise exceptions.NotFound("No such address.")
        return entry

    @extend_schema(
        operation_id="accounts_addresses_read",
        responses={200: AddressBookEntrySerializer, 401: UNAUTHENTICATED, 404: NO_SUCH_ADDRESS},
    )
    def get(self, request, address_id: int):
        return Response(AddressBookEntrySerializer(self._entry(request, address_id)).data)

    @extend_schema(
        operation_id="accounts_addresses_update",
        request=AddressBookEntryUpdateSerializer,
        description="Change the address, or make it a default (a default moves, it is never unset).",
        responses={
            200: AddressBookEntrySerializer,
            400: ADDRESS_REFUSED,
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            404: NO_SUCH_ADDRESS,
        },
    )
    def patch(self, request, address_id: int):
        entry = self._entry(request, address_id)
        data = AddressBookEntryUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        entry = address_book_update(
            entry=entry,
            address=data.validated_data.get("address"),
            default_shipping=data.validated_data.get("is_default_shipping", False),
            default_billing=data.validated_data.get("is_default_billing", False),
        )
        return Response(AddressBookEntrySerializer(entry).data)

    @extend_schema(
        operation_id="accounts_addresses_delete",
        responses={204: None, 401: UNAUTHENTICATED, 403: CSRF_REFUSED, 404: NO_SUCH_ADDRESS},
    )
    def delete(self, request, address_id: int):
        address_book_remove(entry=self._entry(request, address_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
