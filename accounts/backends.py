from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend


class EmailOrUsernameBackend(ModelBackend):
    """Log in with the username or the email (letter case aside, as one account per email is kept).

    An email that two users share (made outside sign-up, say by staff) logs neither in by email: the
    username still works. As Django's own backend, it runs the password hasher for an unknown name too,
    so the time taken does not tell which names exist.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None or "@" not in username:
            return super().authenticate(request, username=username, password=password, **kwargs)
        users = list(get_user_model()._default_manager.filter(email__iexact=username.strip())[:2])
        if len(users) != 1:
            return super().authenticate(request, username=username, password=password, **kwargs)
        user = users[0]
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None
