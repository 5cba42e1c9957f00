"""Celery tasks: the account emails, sent by the worker so that no request waits on a mail server."""

from celery import shared_task
from django.db import OperationalError

from accounts.emails import account_email_send


@shared_task(autoretry_for=(OperationalError,), retry_backoff=1, max_retries=3)
def send_account_email(kind: str, user_id: int | None = None, email: str | None = None) -> bool:
    return account_email_send(kind=kind, user_id=user_id, email=email)
