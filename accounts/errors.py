from http import HTTPStatus

from core.errors import DomainError


class EmailTaken(DomainError):
    code = "email_taken"
    status_code = HTTPStatus.CONFLICT
    default_detail = "An account with this email exists already: log in, or reset its password."


class UsernameTaken(DomainError):
    code = "username_taken"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This username is taken: choose another."


class VerificationLinkInvalid(DomainError):
    """A verification link that was never ours, or names an email its account no longer has."""

    code = "verification_invalid"
    default_detail = "This verification link is not valid. Ask for a new one."


class VerificationLinkExpired(DomainError):
    code = "verification_expired"
    status_code = HTTPStatus.GONE
    default_detail = "This verification link has expired. Ask for a new one."
