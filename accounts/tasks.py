"""Celery tasks: the account emails, sent by the worker so that no request waits on a mail server."""

import logging

from celery import Task, shared_task

from accounts.emails import TRANSIENT_ERRORS, account_email_send

logger = logging.getLogger(__name__)


class AccountEmailTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo):
        """Retries spent (or an error not worth one): the email is lost, and said so (the buyer may ask again)."""
        logger.error("account email %s not sent: %r", kwargs.get("kind"), exc)


@shared_task(base=AccountEmailTask, autoretry_for=TRANSIENT_ERRORS, retry_backoff=1, max_retries=3)
def send_account_email(kind: str, user_id: int | None = None, email: str | None = None) -> bool:
    return account_email_send(kind=kind, user_id=user_id, email=email)
