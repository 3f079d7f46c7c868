"""Files holding keys that other local users can read: the ``.env`` of the working
directory, which the settings and litellm read keys from. Created under the default
umask it is 0644, and a key in it is then every local account's. The settings say so
once per entry point, with the fix (``chmod 600``); they still read it."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Iterable

# a key by its name, whoever reads it: a provider's (OPENAI_API_KEY), Prefect's (PREFECT_API_KEY,
# PREFECT_API_AUTH_STRING), PostgreSQL's (PGPASSWORD)
_KEY_NAME = re.compile(r"^[A-Z0-9_]*(API_?KEY|_TOKEN|_SECRET|_SECRET_KEY|PASSWORD|AUTH_STRING)$")


def open_to_others(path: Path) -> int:
    """The permission bits of ``path`` that let its group or others in (0 when none, or no file)."""
    try:
        return stat.S_IMODE(path.stat().st_mode) & 0o077
    except OSError:
        return 0


def keys_in_dotenv(path: Path, secret_settings: Iterable[str]) -> list[str]:
    """The variables of the dotenv file ``path`` that hold a key: a secret setting's
    (``JUDGEFLOW_JUDGE_API_KEY``, ...) or one named as a key (``OPENAI_API_KEY``)."""
    from dotenv import dotenv_values

    secret = {name.upper() for name in secret_settings}
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError):
        return []
    return sorted(name for name, value in values.items()
                  if value and (name.upper() in secret or _KEY_NAME.match(name.upper())))


def key_file_warning(path: Path, secret_settings: Iterable[str]) -> str | None:
    """One line when ``path`` holds a key and others can read it; None otherwise."""
    if not path.is_file() or not open_to_others(path):
        return None
    keys = keys_in_dotenv(path, secret_settings)
    if not keys:
        return None
    mode = stat.S_IMODE(path.stat().st_mode)
    return (f"{path} holds {', '.join(keys)} and other local users can read it (mode {mode:04o}): "
            f"chmod 600 {path}")
