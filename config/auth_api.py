from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.authtoken.views import ObtainAuthToken

from config.api import ErrorSerializer


class TokenObtainApi(ObtainAuthToken):
    """POST username and password, get the API token to send as ``Authorization: Token <token>``."""

    @extend_schema(
        operation_id="auth_token",
        responses={
            200: OpenApiResponse(description='{"token": "..."}'),
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: wrong credentials or missing fields"),
        },
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
