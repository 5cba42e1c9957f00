"""The refusals of a drop's line."""

from http import HTTPStatus

from django.urls import reverse

from core.errors import DomainError


class NotAdmitted(DomainError):
    """An order for a drop's variant from a buyer its line has not admitted: ``line`` is where to join."""

    code = "not_admitted"
    status_code = HTTPStatus.FORBIDDEN
    default_detail = "This product sells through its drop's line: join the line, and order when you are admitted."

    def __init__(self, *, drop: int, **payload):
        super().__init__(
            drop=drop, line=reverse("api:drop-line", args=[drop]), page=reverse("drop", args=[drop]), **payload
        )


class LineClosed(DomainError):
    """The line takes no one now: ``reason`` is ``not_open`` (with ``opens_at``), ``closed`` or ``off``."""

    code = "line_closed"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This drop's line takes no one now."


class LinePaused(DomainError):
    """Redis, which keeps the line, cannot be reached: no one is admitted and no place is lost."""

    code = "line_paused"
    status_code = HTTPStatus.SERVICE_UNAVAILABLE
    transient = True
    default_detail = "The line is paused for a moment; your place is kept. Try again shortly."


class PassInvalid(DomainError):
    """A pass that is missing, altered, or names another drop."""

    code = "pass_invalid"
    status_code = HTTPStatus.FORBIDDEN
    default_detail = "This pass is not valid for this drop: join the line."
