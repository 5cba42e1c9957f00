"""A real SMTP server for tests (aiosmtpd): the shop sends through it as through any (``EMAIL_URL``)."""

import email
from contextlib import contextmanager
from email import policy

from aiosmtpd.controller import Controller

from tests.processes import free_port


class Inbox:
    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        message = email.message_from_bytes(envelope.content, policy=policy.default)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"

    def take(self) -> list[email.message.EmailMessage]:
        taken, self.messages = self.messages, []
        return taken


@contextmanager
def smtp_inbox(settings):
    """An SMTP server on this machine, and the shop's settings pointed at it, while in the block."""
    handler, port = Inbox(), free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", port, False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    try:
        yield handler
    finally:
        controller.stop()


def text_of(message) -> str:
    return message.get_body(("plain",)).get_content()


def html_of(message) -> str:
    return message.get_body(("html",)).get_content()
