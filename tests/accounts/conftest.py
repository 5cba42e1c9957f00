import pytest

PASSWORD = "a-long-passphrase-42"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """Accounts are made by the dozen here: the production hasher's deliberate slowness would cost minutes."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def account_emails_sent_at_once(celery_eager):
    """Account emails are the worker's (``accounts.tasks``): here it runs them in-process, at once."""
