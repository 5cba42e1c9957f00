"""Error responses that never show internals: the API's error shape under /api/, plain pages elsewhere.

Django calls these (``handler400`` ... ``handler500`` in config/urls.py) once DEBUG is off, for errors DRF
does not answer itself: unknown /api/ paths, and unexpected exceptions, which Django has logged already.
"""

from django.http import JsonResponse
from django.views import defaults

API_PREFIX = "/api/"


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


def server_error(request):
    # Never the exception's text: it can hold SQL, paths or data. The log has it.
    if _is_api(request):
        return _api_error(500, "server_error", "Something went wrong on our side; it has been logged.")
    return defaults.server_error(request)
