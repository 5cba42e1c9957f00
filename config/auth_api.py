"""Logging in: the API token and the web login forms, all behind one failed-login throttle (LoginThrottle)."""

from collections.abc import Mapping
from functools import wraps

from django.shortcuts import render
from django.views.decorators.debug import sensitive_post_parameters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authtoken.views import ObtainAuthToken

from config.api import LoginThrottle
from core.api import ErrorSerializer, JSONParser


class TokenObtainApi(ObtainAuthToken):
    """POST username and password, get the API token to send as ``Authorization: Token <token>``."""

    # JSON, as the rest of the API: the schema then promises only what the view parses.
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="auth_token",
        responses={
            200: OpenApiResponse(description='{"token": "..."}'),
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: wrong credentials or missing fields"),
            429: OpenApiResponse(
                ErrorSerializer, description="throttled: too many failed logins from this address or for this user"
            ),
        },
    )
    def post(self, request, *args, **kwargs):
        username = request.data.get("username", "") if isinstance(request.data, Mapping) else ""
        throttle = LoginThrottle(request, username=str(username))
        if not throttle.attempt():
            raise exceptions.Throttled(wait=throttle.wait())
        response = super().post(request, *args, **kwargs)  # wrong credentials raise, and stay counted
        throttle.give_back()  # a login that worked is not a guess
        return response


def login_throttled(view):
    """Wrap a login form view (Django's LoginView, the admin's login): too many failed POSTs get a 429 page."""

    @wraps(view)
    @sensitive_post_parameters("password")  # error reports about this wrapper must not show it either
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        throttle = LoginThrottle(request, username=request.POST.get("username", ""))
        if not throttle.attempt():
            response = render(
                request, "registration/login_throttled.html", {"retry_after": throttle.wait()}, status=429
            )
            response["Retry-After"] = str(throttle.wait())
            return response
        response = view(request, *args, **kwargs)
        if response.status_code == 302 and request.user.is_authenticated:  # a failed login shows the form again
            throttle.give_back()  # a login that worked is not a guess
        return response

    return wrapped
