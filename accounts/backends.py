from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend

from accounts.selectors import user_for_login


class EmailOrUsernameBackend(ModelBackend):
    """Log in with the username or the email, resolved by ``user_for_login`` (the login throttle counts
    each attempt against the same account, ``core.throttling``).

    An email that two users share (made outside sign-up, say by staff) logs neither in by email: the
    username still works. As Django's own backend, it runs the password hasher for an unknown name too,
    so the time taken does not tell which names exist.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        user = self.user_for_login(username)
        if user is None:
            get_user_model()().set_password(password)
            return None
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None

    @staticmethod
    def user_for_login(name):
        """The user ``name`` logs in as (or None): what ``core.throttling`` counts attempts against."""
        return user_for_login(name)
