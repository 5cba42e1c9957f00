"""The secret key of a development shop: made once for this checkout and kept in ``VAR_DIR`` (``var/``).

With no SECRET_KEY set, the embedded mode (neither DATABASE_URL nor REDIS_URL) and DEBUG use it, so the
processes ``bin/run`` starts and the ``manage.py`` commands run beside them sign with one key, with nothing
set. It is random, never a key written in the code, and only this user may read its file (mode 0600).
``config.settings_production`` refuses both modes, so no served shop runs on it.
"""

import os
import secrets
from pathlib import Path

FILE = "secret_key"


def development_secret_key(directory: Path) -> str:
    key_file = directory / FILE
    if not key_file.exists():
        directory.mkdir(parents=True, exist_ok=True)
        # Written whole under a name of its own, then linked into place: processes that start together all
        # read the one key that was linked first, never a half-written file.
        draft = directory / f".{FILE}.{os.getpid()}"
        with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, key_file)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return key_file.read_text().strip()
