"""Settings: what the project's option values (Policy, EngineConfig) share, written once.

Each is a frozen dataclass built from keywords, from a mapping of option strings (``from_mapping``), from
``S3IO_*`` environment variables (``from_env``, where the class has an ``ENV_PREFIX``), or from any of those with
``resolve``, the one entry point for arguments that accept "a value, a mapping of options, or None". Option names
are matched loosely (``loose_key``: case, ``_`` and ``-`` ignored), since Spark lower-cases option keys; errors
name an option in camelCase (``option_name``), or as the user spelled it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from s3io.errors import InvalidConfig

S = TypeVar("S", bound="Settings")


def loose_key(key: str) -> str:
    """An option name as options are matched: letter case, ``_`` and ``-`` ignored."""
    return key.replace("_", "").replace("-", "").lower()


def option_name(field: str) -> str:
    """The camelCase spelling of a field (``stall_timeout`` → ``stallTimeout``), as options and errors use it."""
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


class Settings:
    """Base of a frozen dataclass of options. Subclasses set ``KIND`` (the word errors use: "policy", "engine"),
    ``ENV_PREFIX`` (None: not read from the environment) and implement ``parse_option``."""

    __slots__ = ()
    KIND: ClassVar[str] = "settings"
    ENV_PREFIX: ClassVar[str | None] = None

    @classmethod
    def parse_option(cls, name: str, value: object, *, label: str) -> object:
        """The field value of option ``name`` given as ``value`` (a string, usually); errors name ``label``."""
        raise NotImplementedError

    def replace(self: S, **changes: Any) -> S:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_mapping(cls: type[S], values: Mapping[str, object], base: S | None = None) -> S:
        """Build from strings such as ``{"stallTimeout": "2s", "max_attempts": "5"}`` over ``base`` (default: the
        defaults). Keys may be snake_case or camelCase in any letter case; unknown keys raise InvalidConfig naming
        the known ones."""
        fields = _fields_by_loose_name(cls)
        changes: dict[str, object] = {}
        labels: dict[str, str] = {}
        for raw_key, raw_value in values.items():
            name = fields.get(loose_key(raw_key))
            if name is None:
                known = ", ".join(option_name(n) for n in cls.field_names())
                raise InvalidConfig(f"unknown {cls.KIND} option {raw_key!r}; known options: {known}")
            changes[name] = cls.parse_option(name, raw_value, label=raw_key)
            labels[name] = raw_key
        return _apply(base if base is not None else cls(), changes, labels)

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None, base: S | None = None) -> S:
        """Read ``<ENV_PREFIX><FIELD>`` variables (``S3IO_STALL_TIMEOUT=2s``) over ``base``; unset ones keep it."""
        base = base if base is not None else cls()
        prefix = cls.ENV_PREFIX
        if prefix is None:
            return base
        environ = os.environ if environ is None else environ
        changes: dict[str, object] = {}
        for name in cls.field_names():
            var = prefix + name.upper()
            if var in environ:
                changes[name] = cls.parse_option(name, environ[var], label=var)
        return _apply(base, changes, {n: prefix + n.upper() for n in changes})

    @classmethod
    def resolve(cls: type[S], value: S | Mapping[str, object] | None) -> S:
        """The settings an argument names: None → the environment over the defaults; an instance → itself; a
        mapping of options → those options over the environment over the defaults."""
        if value is None:
            return cls.from_env()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_mapping(value, base=cls.from_env())
        raise InvalidConfig(
            f"{cls.KIND}: expected an s3io {cls.__name__} or a mapping of options, got {type(value).__name__}"
        )

    def describe(self) -> str:
        """``name=value`` for every field, in camelCase (for logs and reprs)."""
        return ", ".join(f"{option_name(f)}={getattr(self, f)!r}" for f in self.field_names())


@functools.cache
def _fields_by_loose_name(cls: type[Settings]) -> dict[str, str]:
    return {loose_key(name): name for name in cls.field_names()}


def _apply(base: S, changes: dict[str, object], labels: dict[str, str]) -> S:
    """Apply parsed changes together; a range error names the option as the user spelled it."""
    try:
        return base.replace(**changes)
    except InvalidConfig as exc:
        text = str(exc)
        for name, label in labels.items():
            if text.startswith(option_name(name) + ":"):
                raise InvalidConfig(f"{label}:{text.split(':', 1)[1]}") from None
        raise
