"""The statement that checks an API token in one round trip (``core.tokens.token_account_id``)."""

from django.contrib.auth import get_user_model
from django.db import connection
from knox.models import get_token_model


def token_rows_statement(*, token_key: str) -> tuple[str, list]:
    """(digest, expiry, user id, the user is active) of the tokens stored under ``token_key``."""
    token, user = get_token_model()._meta, get_user_model()._meta
    q = connection.ops.quote_name
    sql = (
        f"SELECT t.{q('digest')}, t.{q('expiry')}, t.{q('user_id')}, u.{q('is_active')}"
        f" FROM {q(token.db_table)} t JOIN {q(user.db_table)} u ON u.{q(user.pk.column)} = t.{q('user_id')}"
        f" WHERE t.{q('token_key')} = %s"
    )
    return sql, [token_key]
