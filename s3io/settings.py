"""Settings: what the project's option values share, written once.

Two styles, one rule for names. ``Settings`` (Policy, EngineConfig): a frozen dataclass whose every field is an
option, built from keywords, from a mapping of option strings (``from_mapping``), from ``S3IO_*`` environment
variables (``from_env``, where the class has an ``ENV_PREFIX``), or from any of those with ``resolve``, the one entry
point for arguments that accept "a value, a mapping of options, or None". ``option(...)``: a field of any other
options dataclass (the store, a Spark read, a stream, a compaction) that declares its option name, other spellings,
parser and command-line flag where it is defined, so that adding an option is adding a field; ``take_options`` and
``add_arguments`` / ``from_args`` read them from a mapping or a command line. Option names are matched loosely
(``loose_key``: case, ``_`` and ``-`` ignored), since Spark lower-cases option keys; errors name an option in
camelCase (``option_name``), or as the user spelled it.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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


# ----------------------------------------------------------------------------------------- option fields

OptionParser = Callable[[Any, str], Any]  # (the value given, the name to put in an error) -> the field's value
_OPTION = "s3io.option"


@dataclass(frozen=True, slots=True)
class Option:
    """How a field is given: ``name`` (camelCase: errors and docs spell it so), other ``aliases`` it is accepted
    under, its ``parse``r, a command-line ``flag`` (None: not a flag) with its ``help``, and an environment variable
    ``env`` (None: not read from the environment)."""

    name: str
    parse: OptionParser
    aliases: tuple[str, ...] = ()
    flag: str | None = None
    help: str = ""
    secret: bool = False
    env: str | None = None


def option(
    name: str,
    parse: OptionParser,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    aliases: Iterable[str] = (),
    flag: str | None = None,
    help: str = "",
    secret: bool = False,
    env: str | None = None,
) -> Any:
    """A dataclass field given as the option ``name`` (see Option); a ``secret`` one is left out of repr."""
    spec = Option(name, parse, tuple(aliases), flag, help, secret, env)
    return dataclasses.field(  # type: ignore[call-overload]
        default=default, default_factory=default_factory, repr=not secret, metadata={_OPTION: spec}
    )


@functools.cache
def declared_options(cls: type) -> dict[str, tuple[str, str, Option]]:
    """Every spelling of every option ``cls`` declares, loosely: {loose spelling: (field, spelling, Option)}."""
    found: dict[str, tuple[str, str, Option]] = {}
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_OPTION)
        if spec is not None:
            for spelling in (spec.name, *spec.aliases):
                found[loose_key(spelling)] = (f.name, spelling, spec)
    return found


def declared_option(cls: type, field_name: str) -> Option:
    """The Option the field ``field_name`` of ``cls`` declares (KeyError if it declares none)."""
    for f in dataclasses.fields(cls):
        if f.name == field_name and _OPTION in f.metadata:
            return f.metadata[_OPTION]
    raise KeyError(field_name)


def option_spellings(cls: type) -> tuple[str, ...]:
    """The names (and aliases) of the options ``cls`` declares, for "known options" lists."""
    return tuple(spelling for _, spelling, _ in declared_options(cls).values())


def take_options(cls: type, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields that the options ``cls`` declares give in ``values``, parsed; the other entries, untouched).

    Two spellings of one option with different values are an InvalidConfig; a parse error names the option as
    declared (its camelCase name, or the alias used)."""
    declared = declared_options(cls)
    changes: dict[str, Any] = {}
    given: dict[str, tuple[str, Any]] = {}
    rest: dict[str, Any] = {}
    for key, value in values.items():
        hit = declared.get(loose_key(str(key)))
        if hit is None:
            rest[key] = value
            continue
        name, spelling, spec = hit
        if name in given:
            if given[name][1] != value:
                raise InvalidConfig(
                    f"option {spec.name} is given twice, as {given[name][0]!r} and {key!r}, with different values; "
                    "give it once"
                )
            continue
        given[name] = (str(key), value)
        changes[name] = spec.parse(value, spelling)
    return changes, rest


def env_options(cls: type, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields that the environment variables of ``cls``'s options give (``env=...``), parsed; a parse error
    names the variable."""
    environ = os.environ if environ is None else environ
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_OPTION)
        if spec is not None and spec.env is not None and environ.get(spec.env, "").strip():
            changes[f.name] = spec.parse(environ[spec.env], spec.env)
    return changes


def unknown_option(key: str, known: Iterable[str], *, kind: str = "option") -> InvalidConfig:
    """The error for an option nobody declares: the closest known name where one is close (a line a person reads
    whole), else every known one."""
    names = sorted(dict.fromkeys(known), key=str.lower)
    by_loose = {loose_key(n): n for n in names}
    close = difflib.get_close_matches(loose_key(key), list(by_loose), n=1, cutoff=0.75)
    if close:
        return InvalidConfig(f"unknown {kind} {key!r} (did you mean {by_loose[close[0]]}?); names are case-insensitive")
    return InvalidConfig(f"unknown {kind} {key!r}; known options (case-insensitive): {', '.join(names)}")


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, defaults: bool = True) -> None:
    """One command-line flag per option of ``cls`` that declares one (a bool field is a switch). ``defaults=False``
    leaves an absent flag unset (for a subcommand's copy of flags the main parser also has)."""
    for f, spec in _flagged(cls):
        extra: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
        if f.default is False:
            parser.add_argument(spec.flag, dest=f.name, action="store_true", help=spec.help, **extra)
        else:
            parser.add_argument(spec.flag, dest=f.name, metavar="VALUE", help=spec.help, **extra)


def from_args(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields that the flags of ``cls``'s options give in ``args`` (unset ones left out), parsed; a parse error
    names the flag."""
    changes: dict[str, Any] = {}
    for f, spec in _flagged(cls):
        value = getattr(args, f.name, None)
        if value is not None and value is not False:
            changes[f.name] = spec.parse(value, spec.flag)
    return changes


def _flagged(cls: type) -> list[tuple[dataclasses.Field[Any], Option]]:
    """The fields of ``cls`` given by a command-line flag, with their Option, in field order."""
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_OPTION)
        if spec is not None and spec.flag is not None:
            found.append((f, spec))
    return found
