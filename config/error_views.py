"""Error responses that never show internals: the API's error shape under /api/, plain pages elsewhere.

Django calls these (``handler400`` ... ``handler500`` in config/urls.py) once DEBUG is off, for errors DRF
does not answer itself: unknown /api/ paths, and unexpected exceptions, which Django has logged already.
Unknown /api/ paths and unexpected errors under /api/ answer the API's shape with DEBUG on too
(``api_errors_middleware``): bin/run serves with DEBUG on, and the API promises JSON.
"""

import re
import sys
from urllib.parse import urlsplit

from django.http import HttpResponse, JsonResponse
from django.template import loader
from django.views import defaults
from django.views.debug import SafeExceptionReporterFilter

from config.api import RETRY_AFTER_SECONDS, domain_error_body
from core.db import connection_lost
from core.errors import DatabaseUnavailable

API_PREFIX = "/api/"


class CredentialFilter(SafeExceptionReporterFilter):
    """Django's filter for debug pages and error reports, which also masks settings that carry credentials
    inside a URL: the Redis and broker URLs, cache locations, any DSN.

    Django masks settings by name (KEY, SECRET, PASS, ...); a store's URL has none of those in its name.
    Masked here: every setting named like a store location, and any URL with a user or password in it
    (``user:pass@`` or ``?password=``, as the embedded Redis's unix socket URL carries it).
    """

    hidden_settings = re.compile(
        SafeExceptionReporterFilter.hidden_settings.pattern + "|REDIS|BROKER|BACKEND|LOCATION|DSN|DATABASE_URL",
        flags=re.IGNORECASE,
    )

    def cleanse_setting(self, key, value):
        if isinstance(value, str) and _carries_credentials(value):
            return self.cleansed_substitute
        return super().cleanse_setting(key, value)


def _carries_credentials(value: str) -> bool:
    if "://" not in value:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:  # a URL this cannot read: masked rather than shown
        return True
    return bool(parts.username or parts.password or "password=" in parts.query.lower())


def _is_api(request) -> bool:
    return request.path_info.startswith(API_PREFIX)


def _api_error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail, "fields": {}}, status=status)


def bad_request(request, exception):
    if _is_api(request):
        return _api_error(400, "bad_request", "The request could not be understood.")
    return defaults.bad_request(request, exception)


def permission_denied(request, exception):
    if _is_api(request):
        return _api_error(403, "permission_denied", "You do not have permission to perform this action.")
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception):
    if _is_api(request):
        return _api_error(404, "not_found", "Not found.")
    return defaults.page_not_found(request, exception)


def api_errors_middleware(get_response):
    """Under /api/, a path no URL matches answers the API's ``not_found``, and an unexpected error its
    ``server_error``, whatever DEBUG is (the API's handler answers a lost database connection itself).

    With DEBUG on (bin/run) Django answers both with its debug page, SQL included, rather than
    ``handler404`` and ``handler500``; it has logged the error by then. Listed last, so CommonMiddleware
    still redirects a path missing only its slash.
    """

    def middleware(request):
        response = get_response(request)
        if not _is_api(request) or response.get("Content-Type", "").startswith("application/json"):
            return response
        if response.status_code == 404 and request.resolver_match is None:
            return page_not_found(request, None)
        if response.status_code == 500:
            return _api_server_error()
        return response

    return middleware


def server_error(request):
    # Django calls this while handling the exception, so it is still at hand. A lost database
    # connection (a restart, a failover) rolled the request back and is worth retrying: 503.
    if connection_lost(sys.exc_info()[1]):
        return _database_unavailable(request)
    if _is_api(request):
        return _api_server_error()
    return defaults.server_error(request)


def _api_server_error() -> JsonResponse:
    # Never the exception's text: it can hold SQL, paths or data. The log has it.
    return _api_error(500, "server_error", "Something went wrong on our side; it has been logged.")


def _database_unavailable(request) -> HttpResponse:
    error = DatabaseUnavailable()
    if _is_api(request):
        response = JsonResponse(domain_error_body(error), status=error.status_code)
    else:
        # No context processors: they may need the database that just went away.
        response = HttpResponse(loader.get_template("503.html").render(), status=error.status_code)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
