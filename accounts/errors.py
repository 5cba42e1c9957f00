from http import HTTPStatus

from core.errors import DomainError, InvalidInput


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


class VerificationLinkUsed(DomainError):
    """The account was verified with it already, or its password changed since it was sent."""

    code = "verification_used"
    status_code = HTTPStatus.GONE
    default_detail = "This verification link was used, or the password changed since: log in, or reset the password."


class VerificationPasswordWrong(InvalidInput):
    """The link is good but the password is not the account's: only the one who chose it verifies with it."""

    default_detail = "That is not the password chosen at sign-up. Forgot it, or not yours? Reset the password."

    def __init__(self):
        super().__init__(fields={"password": self.default_detail})
