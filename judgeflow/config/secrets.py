"""Secrets from Prefect Secret blocks as well as from the environment.

Every secret setting (a ``SecretStr`` field of :class:`~judgeflow.config.settings.Settings`:
``JUDGEFLOW_DATABASE_URL``, ``JUDGEFLOW_JUDGE_API_KEY``, ``JUDGEFLOW_JUDGE_API_BASE``, ``JUDGEFLOW_ALERT_WEBHOOK_URL``,
``JUDGEFLOW_ALERT_WEBHOOK_SECRET``, ``JUDGEFLOW_ALERT_SLACK_WEBHOOK_URL``) holds
either the value itself or a reference to a Prefect Secret block::

    JUDGEFLOW_JUDGE_API_KEY=prefect-secret://judge-api-key

:func:`resolve_secrets` replaces each reference by the block's value, at the
entry point, once. One variable per secret, holding a value or a reference, so
there is never a question of which of two wins; the reference is only a block
name, so it may sit in a deployment's job variables, a compose file or a
``.env`` without leaking anything. Prefect is contacted only when a reference
is present.

This module works on any pydantic model with ``SecretStr`` fields and imports
nothing of :mod:`judgeflow.config.settings`: the settings loader calls it, never the
other way round.
"""

from __future__ import annotations

import logging
import typing

from pydantic import BaseModel, SecretStr

from judgeflow.errors import ConfigError

log = logging.getLogger("judgeflow.config.secrets")

SECRET_REF_PREFIX = "prefect-secret://"

SettingsT = typing.TypeVar("SettingsT", bound=BaseModel)


def secret_fields(settings_type: type[BaseModel]) -> list[str]:
    """The names of the settings that hold secrets (``SecretStr`` fields)."""
    return [
        name
        for name, field in settings_type.model_fields.items()
        if field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)
    ]


def env_name(field: str) -> str:
    return f"JUDGEFLOW_{field.upper()}"


def block_reference(value: SecretStr | str | None) -> str | None:
    """The Secret block name when ``value`` is a ``prefect-secret://<name>``
    reference, else None."""
    if value is None:
        return None
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    raw = raw.strip()
    if not raw.startswith(SECRET_REF_PREFIX):
        return None
    return raw[len(SECRET_REF_PREFIX):].strip()  # "" when the name is missing


def secret_references(settings: BaseModel) -> dict[str, str]:
    """field -> Secret block name, for the settings that hold a reference."""
    refs = {}
    for field in secret_fields(type(settings)):
        name = block_reference(getattr(settings, field))
        if name is not None:
            refs[field] = name
    return refs


def load_secret_block(name: str) -> object:
    """The value of the Prefect Secret block ``name`` (on the configured Prefect API)."""
    from prefect.blocks.system import Secret

    return Secret.load(name, _sync=True).get()


def resolve_secrets(
    settings: SettingsT, *, loader: typing.Callable[[str], object] = load_secret_block
) -> SettingsT:
    """``settings`` with every ``prefect-secret://<block>`` reference replaced by
    that Secret block's value, as a new, validated settings object (so a database URL
    from a block is normalised like one from the environment). Returns
    ``settings`` itself when nothing refers to a block. Raises ConfigError,
    naming the variable and the block but never a value, when a block is
    missing, unreachable or does not hold a string."""
    refs = secret_references(settings)
    if not refs:
        return settings
    resolved: dict[str, SecretStr] = {}
    for field, name in refs.items():
        where = f"{env_name(field)} refers to the Prefect Secret block {name!r}"
        if not name:
            raise ConfigError(f"{env_name(field)}: {SECRET_REF_PREFIX} needs a block name, e.g. {SECRET_REF_PREFIX}judge-api-key")
        try:
            value = loader(name)
        except ValueError as error:  # Block.load: "Unable to find block document named ..."
            if "find block document" not in str(error):
                raise ConfigError(f"{where}, which could not be read: {error}") from None
            raise ConfigError(
                f"{where}, which does not exist on the Prefect API (PREFECT_API_URL); create it "
                "(`prefect block create secret`, or in the UI: Blocks > Secret) or set the value itself"
            ) from None
        except Exception as error:  # API unreachable, permission denied, ...
            raise ConfigError(f"{where}, which could not be read: {type(error).__name__}: {error}") from None
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}, which must hold a non-empty string (it holds a {type(value).__name__})")
        if block_reference(value) is not None:
            raise ConfigError(f"{where}, which holds another reference; store the value itself")
        resolved[field] = SecretStr(value)
        log.info("%s read from the Prefect Secret block %r", env_name(field), name)
    values = {name: getattr(settings, name) for name in type(settings).model_fields}
    values.update(resolved)
    try:
        # every field is given, so no value comes from the environment again
        validated = type(settings).model_validate(values)
    except ConfigError:
        raise
    except Exception as error:  # pydantic.ValidationError: SecretStr values stay masked
        raise ConfigError(f"invalid judgeflow settings after reading Prefect Secret blocks: {error}") from None
    # the fields counted as set stay those the environment set: a default stays a default
    return type(settings).model_construct(
        _fields_set=settings.model_fields_set | set(resolved),
        **{name: getattr(validated, name) for name in type(settings).model_fields},
    )
