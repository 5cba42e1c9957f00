"""The API's wiring: one error shape for every app's refusals, pagination, the login throttle.

Every refusal is ``{"code": ..., "detail": ..., "fields": {...}}`` plus the error's payload (for
``insufficient_stock``, ``shortages``). A domain error carries its own HTTP status (``status_code``).
"""

import logging

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property
from rest_framework import exceptions, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.db import connection_lost
from core.errors import DatabaseUnavailable, DomainError
from core.numbers import PAGE_MAX, NumberInvalid, number_whole

RETRY_AFTER_SECONDS = 1

logger = logging.getLogger(__name__)

# DRF's own exceptions, renamed where their default code says less than ours.
DRF_CODES = {"parse_error": "malformed_json", "invalid": "invalid_input"}


def exception_handler(exc, context):
    """Render domain errors and DRF's errors in the one shape; 503s say when to retry."""
    if connection_lost(exc):
        logger.error("database connection lost during %s: %s", context["request"].path, exc)
        exc = DatabaseUnavailable()
    if isinstance(exc, DomainError):
        response = Response(domain_error_body(exc), status=exc.status_code)
    else:
        response = drf_exception_handler(exc, context)
        if response is None:
            return None  # an unexpected error: Django's 500 handling and logging take over
        response.data = _drf_error_body(exc, response)
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def domain_error_body(exc: DomainError) -> dict:
    """The API's body of a domain error: its code, detail and payload, and ``fields`` (empty unless it has some)."""
    body = exc.as_dict()
    body.setdefault("fields", {})
    return body


def _drf_error_body(exc, response) -> dict:
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return {"code": "invalid_input", "detail": "The request is not valid.", "fields": fields}
    if isinstance(exc, exceptions.APIException):
        code = exc.get_codes()
        code = code if isinstance(code, str) else "error"
        return {"code": DRF_CODES.get(code, code), "detail": str(exc.detail), "fields": {}}
    # Http404 and PermissionDenied from Django, converted by DRF's handler.
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
    code = "not_found" if response.status_code == 404 else "permission_denied"
    return {"code": code, "detail": str(detail), "fields": {}}


class BoundedCountPaginator(Paginator):
    """Django's paginator over a list counted no further than ``LIST_COUNT_LIMIT`` rows.

    A plain count is a ``COUNT(*)`` of every matching row on every page: over a customer's orders or a
    stock's ledger that grows with history, that scan is what a page costs. This counts a ``LIMIT``-ed
    subquery, as the admin's lists do (``core.admin.BoundedCountPaginator``), here one row past the limit
    to tell whether more match; the pages go as far as the limit.
    """

    @cached_property
    def counted(self) -> int:
        """The rows matching, counted up to one past the limit."""
        bound = settings.LIST_COUNT_LIMIT + 1
        if isinstance(self.object_list, QuerySet):
            return self.object_list.order_by()[:bound].count()  # no order to keep: any index may count
        return len(self.object_list[:bound])

    @cached_property
    def count(self) -> int:
        return min(self.counted, settings.LIST_COUNT_LIMIT)

    @property
    def count_exact(self) -> bool:
        """Whether ``count`` is every row matching, not the limit with more beyond it."""
        return self.counted <= settings.LIST_COUNT_LIMIT


class Pagination(PageNumberPagination):
    """Pages of 20 (``page_size`` up to 100), counted no further than ``LIST_COUNT_LIMIT`` rows.

    The answer is DRF's (``count``, ``next``, ``previous``, ``results``) plus ``count_exact``: false when more
    rows match than the limit, ``count`` is then the limit and the pages stop there. A malformed ``page``
    or ``page_size`` is a 400, not ignored.
    """

    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100
    django_paginator_class = BoundedCountPaginator

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None:
            try:
                number_whole(raw, low=1, high=self.max_page_size)
            except NumberInvalid:
                raise exceptions.ValidationError(
                    {"page_size": f"A whole number from 1 to {self.max_page_size}."}
                ) from None
        return super().get_page_size(request)

    def get_page_number(self, request, paginator):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None:
            try:
                number_whole(raw, high=PAGE_MAX)
            except NumberInvalid:
                raise exceptions.ValidationError({"page": "A page number, from 1."}) from None
        return super().get_page_number(request, paginator)

    def get_paginated_response(self, data):
        return Response(
            {
                "count": self.page.paginator.count,
                "count_exact": self.page.paginator.count_exact,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema):
        response = super().get_paginated_response_schema(schema)
        limit, properties = settings.LIST_COUNT_LIMIT, response["properties"]
        count = {**properties.pop("count"), "description": f"The rows matching, counted no further than {limit}."}
        count_exact = {
            "type": "boolean",
            "description": f"false: more rows match than were counted; count is the limit ({limit}) and the pages "
            "stop there.",
        }
        response["properties"] = {"count": count, "count_exact": count_exact, **properties}
        response["required"] = [*response["required"], "count_exact"]
        return response

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"]["maximum"] = self.max_page_size
            if parameter["name"] == self.page_query_param:
                parameter["description"] = "A page number, from 1; the pages go as far as count (else 404)."
        return parameters
