"""The line's API: join a drop's line, say where a place stands, and the news every waiting client reads.

Joining needs an account (the API's orders do); the place is answered with its pass (a token), sent back
as ``X-Drop-Pass``. Reading a place or the news touches Redis only: no authentication, no database.
``line_join_answer`` and ``line_place_answer`` are the answers both this view and the push process give
(``config.push`` serves the same paths outside Django's request cycle, for a crowd)."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import UNAUTHENTICATED, ErrorSerializer, StrictIntegerField
from drops import passes
from drops.errors import PassInvalid
from drops.models import UNITS_PER_BUYER_MAX
from drops.waiting import line_enter, news_current, place_told
from shop.models import SKU_MAX_LENGTH

# What the API says of a place, and of the line (``drops.waiting.Told``, ``drops.rules.LineState``).
PLACE_STATES = ["waiting", "admitted", "refused", "sold_out", "closed"]
LINE_STATES = ["not_open", "open", "sold_out", "closed"]
PASS = OpenApiParameter(
    passes.HEADER, str, OpenApiParameter.HEADER, required=True, description="The pass joining answered."
)
PAUSED = OpenApiResponse(
    ErrorSerializer, description="line_paused: Redis is down; every place is kept. See Retry-After"
)
NO_PATH = OpenApiResponse(ErrorSerializer, description="not_found: no such path (a drop's id is a number)")
PASS_REFUSED = OpenApiResponse(ErrorSerializer, description="pass_invalid: missing, altered, or another drop's")


class PlaceOutputSerializer(serializers.Serializer):
    drop = serializers.IntegerField()
    ticket = serializers.IntegerField(help_text="The place's arrival number.")
    state = serializers.ChoiceField(PLACE_STATES)
    ahead = serializers.IntegerField(help_text="Places ahead of this one for the same product.")
    sku = serializers.CharField()
    quantity = serializers.IntegerField()
    units = serializers.ChoiceField(["plenty", "few", "sold_out"], help_text="Units left, coarse.")
    estimate_seconds = serializers.IntegerField(allow_null=True, help_text="At the pace admitted now.")
    poll_seconds = serializers.IntegerField(help_text="Ask again after this long (also Retry-After).")
    order = serializers.CharField(allow_null=True, help_text="Admitted: the held order to check out.")
    held_until = serializers.DateTimeField(allow_null=True, help_text="Admitted: when the hold lapses.")
    code = serializers.CharField(allow_null=True, help_text="Refused: why (limit_exceeded, hold_lapsed).")


class JoinOutputSerializer(PlaceOutputSerializer):
    pass_token = serializers.CharField(help_text=f"Send it as {passes.HEADER} to read the place and check out.")


class JoinInputSerializer(serializers.Serializer):
    sku = serializers.CharField(max_length=SKU_MAX_LENGTH)
    quantity = StrictIntegerField(min_value=1, max_value=UNITS_PER_BUYER_MAX, default=1)


def _answer(told, *, created: bool = False, pass_token: str | None = None) -> Response:
    body = told.as_dict() | ({"pass_token": pass_token} if pass_token else {})
    response = Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
    if told.poll:
        response["Retry-After"] = str(told.poll)
    return response


def line_join_answer(*, drop_id: int, data, customer_id: int, ticket: int | None) -> Response:
    """Join for the account ``customer_id`` with the API's input (checked here; DRF's errors raised)."""
    checked = JoinInputSerializer(data=data)
    checked.is_valid(raise_exception=True)
    told, new = line_enter(
        drop_id=drop_id,
        sku=checked.validated_data["sku"],
        quantity=checked.validated_data["quantity"],
        customer_id=customer_id,
        email="",
        ticket=ticket,
    )
    return _answer(told, created=new, pass_token=passes.pass_issue(drop_id=drop_id, ticket=told.ticket))


def line_place_answer(*, drop_id: int, ticket: int | None) -> Response:
    """The place the pass's ``ticket`` names (``pass_invalid`` if none)."""
    told = place_told(drop_id=drop_id, ticket=ticket) if ticket is not None else None
    if told is None:
        raise PassInvalid()
    return _answer(told)


class DropLineApi(APIView):
    """POST joins the drop's line (idempotent: the same account gets the same place); GET reads the place."""

    def _reading(self) -> bool:
        """A GET or HEAD: the pass is the right to read the place (the schema's generator asks with no request)."""
        return getattr(getattr(self, "request", None), "method", None) in ("GET", "HEAD")

    def get_authenticators(self):
        return [] if self._reading() else super().get_authenticators()

    def get_permissions(self):
        return [AllowAny()] if self._reading() else super().get_permissions()

    def get_throttles(self):
        return [] if self._reading() else super().get_throttles()

    @extend_schema(
        operation_id="drop_line_join",
        request=JoinInputSerializer,
        responses={
            200: JoinOutputSerializer,
            201: JoinOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: a product not in the drop, quantity"),
            401: UNAUTHENTICATED,
            404: NO_PATH,
            409: OpenApiResponse(ErrorSerializer, description="line_closed (reason: not_open, closed, off)"),
            503: PAUSED,
        },
    )
    def post(self, request, pk: int):
        ticket = passes.pass_of_request(request, drop_id=pk)
        return line_join_answer(drop_id=pk, data=request.data, customer_id=request.user.pk, ticket=ticket)

    @extend_schema(
        operation_id="drop_line_place",
        auth=[],
        parameters=[PASS],
        responses={
            200: PlaceOutputSerializer,
            403: PASS_REFUSED,
            404: NO_PATH,
            503: PAUSED,
        },
    )
    def get(self, request, pk: int):
        return line_place_answer(drop_id=pk, ticket=passes.pass_of_request(request, drop_id=pk))


class DropNewsApi(APIView):
    """The news every waiting client checks, the same for all: the line's state and each product's units."""

    authentication_classes, permission_classes, throttle_classes = [], [AllowAny], []

    class NewsOutputSerializer(serializers.Serializer):
        state = serializers.ChoiceField(LINE_STATES)
        variants = serializers.DictField(help_text="By variant id: sku, name, units (plenty, few, sold_out).")
        rate = serializers.FloatField(help_text="Buyers admitted a second, as measured.")

    @extend_schema(operation_id="drop_news", responses={200: NewsOutputSerializer, 404: NO_PATH, 503: PAUSED})
    def get(self, request, pk: int):
        news = news_current(drop_id=pk) or {"state": "not_open", "variants": {}, "rate": 0}
        response = Response({key: news.get(key) for key in ("state", "variants", "rate", "opens_at", "name")})
        response["Cache-Control"] = "public, max-age=1"  # one shared answer: a proxy may serve it to everyone
        return response
