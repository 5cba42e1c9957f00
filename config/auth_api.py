"""Logging in: the API token and the web login forms, all behind one failed-login throttle (LoginThrottle)."""

from collections.abc import Mapping
from functools import wraps

from django.views.decorators.debug import sensitive_post_parameters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer, JSONParser
from core.services import api_token_create
from core.throttling import LoginThrottle, login_throttled_page
from core.tokens import TokenAuthentication


class TokenObtainApi(APIView):
    """POST username and password, get an API token to send as ``Authorization: Token <token>``.

    The token is django-rest-knox's: the database keeps only its hash, and it lives
    ``API_TOKEN_TTL_SECONDS``, until revoked, or until the user's password changes (``core.tokens``).
    """

    authentication_classes = []  # a stale token in the request must not stop a login
    permission_classes = []
    # JSON, as the rest of the API: the schema then promises only what the view parses.
    parser_classes = [JSONParser]

    class TokenOutputSerializer(serializers.Serializer):
        token = serializers.CharField()
        expires = serializers.DateTimeField(help_text="When the token stops working; log in again for another.")

    @extend_schema(
        operation_id="auth_token",
        request=AuthTokenSerializer,
        responses={
            200: TokenOutputSerializer,
            400: OpenApiResponse(
                ErrorSerializer, description="invalid_input: wrong credentials or missing fields; malformed_json"
            ),
            429: OpenApiResponse(
                ErrorSerializer, description="throttled: too many failed logins from this address or for this user"
            ),
        },
    )
    def post(self, request):
        username = request.data.get("username", "") if isinstance(request.data, Mapping) else ""
        throttle = LoginThrottle(request, username=str(username))
        if not throttle.attempt():
            raise exceptions.Throttled(wait=throttle.wait())
        credentials = AuthTokenSerializer(data=request.data, context={"request": request})
        credentials.is_valid(raise_exception=True)  # wrong credentials raise, and stay counted
        throttle.give_back()  # a login that worked is not a guess
        token, secret = api_token_create(user=credentials.validated_data["user"])
        return Response(self.TokenOutputSerializer({"token": secret, "expires": token.expiry}).data)


class TokenRevokeApi(APIView):
    """POST with a token to revoke it: it stops working at once (an API client logging out)."""

    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="auth_token_revoke",
        request=None,
        responses={
            204: OpenApiResponse(description="revoked"),
            401: OpenApiResponse(
                ErrorSerializer, description="not_authenticated, authentication_failed (already revoked or expired)"
            ),
        },
    )
    def post(self, request):
        request.auth.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


def login_throttled(view, *, field: str = "username"):
    """Wrap a login form view (Django's LoginView, the admin's login), or another form that guesses at
    accounts (sign-up, a new verification link, a password reset; ``field`` names whom it is about): too
    many POSTs that do not log in get a 429 page."""

    @wraps(view)
    @sensitive_post_parameters("password")  # error reports about this wrapper must not show it either
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        throttle = LoginThrottle(request, username=request.POST.get(field, ""))
        if not throttle.attempt():
            return login_throttled_page(request, throttle)
        response = view(request, *args, **kwargs)
        if response.status_code == 302 and request.user.is_authenticated:  # a failed login shows the form again
            throttle.give_back()  # a login that worked is not a guess
        return response

    return wrapped
