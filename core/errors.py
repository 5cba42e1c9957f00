"""The base of every domain error, and the generic refusals of malformed input.

Each error carries a stable machine-readable ``code`` and a payload. Views, the API's exception handler
and commands turn them into responses; they never need to parse messages. The errors of one domain
live in its app (``shop.errors``, ``inventory.errors``, ``orders.errors``).
"""


class DomainError(Exception):
    code = "domain_error"
    default_detail = "The request could not be carried out."

    def __init__(self, detail: str | None = None, **payload):
        self.detail = detail or self.default_detail
        self.payload = payload
        super().__init__(self.detail)

    def as_dict(self) -> dict:
        return {"code": self.code, "detail": self.detail, **self.payload}

    def as_text(self) -> str:
        """One line for operators: code, detail and payload."""
        details = ", ".join(f"{key}={value}" for key, value in self.payload.items())
        return f"{self.code}: {self.detail}" + (f" ({details})" if details else "")


class InvalidInput(DomainError):
    """Malformed input: wrong types, bad quantity, duplicates. ``fields`` says what is wrong."""

    code = "invalid_input"
    default_detail = "The request is not valid."


class InvalidQuantity(InvalidInput):
    code = "invalid_quantity"
    default_detail = "Quantity must be a whole number in the allowed range."
