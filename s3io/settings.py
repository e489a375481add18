"""Settings: the one way a setting of the project is declared, parsed and documented.

Every option value (Policy and its Timeouts / Retry / Sockets, EngineConfig, StoreConfig, WriteOptions,
CompactionOptions, and spark_ext's ReadOptions / StreamOptions) is a frozen dataclass made with ``@settings``, whose
every setting is a field declared once with ``setting(...)``: its option name and aliases, its Python keyword, its
command-line flag, its ``S3IO_*`` variable, the Spark session setting it defaults to, the S3A key that sets it as it
is, its parser (which gives its type and unit), its range (a ``Range``: ``at_least``, ``above``, ``between``; enforced
on every value whatever its source, by ``@settings``, and shown in the docs), its help, and whether it is secret. A
field declared with ``group(Cls)`` holds a smaller value whose settings are the outer value's too (a store's options
include its policy's and its engine's); ``group(Cls, flat=True)`` also takes and shows them as the outer value's own
keywords and attributes (``Policy(stall_timeout=2)``, ``policy.stall_timeout``, ``policy.replace(max_attempts=1)``).

One parser (``parse_options``) and one constructor path per source, the same on every value:
- keywords: the class itself (``Policy(max_attempts=3)``) and ``replace``; an alias's snake_case spelling is a
  keyword too (``lock_ttl`` for ``lease_ttl``);
- a mapping of option strings (Spark's options, a ``policy={...}`` argument): ``from_options(values, base)`` (an
  unknown option is an error naming the known ones) and ``take_options(values, base)`` → (value, the entries it does
  not know);
- the environment: ``from_env(environ, base)``; a command line: ``add_arguments(parser)`` and ``from_args(args, base)``;
- "a value, a mapping of options, or None" (a Python API argument): ``resolve``.
``base`` defaults to ``from_env()`` (the ``S3IO_*`` variables over the defaults; ``from_mapping`` is ``from_options``
over the bare defaults). StoreConfig adds ``from_kwargs`` (the Python API's keywords) and ``from_s3a`` (S3A's
settings, through s3io.s3a's table); ReadOptions and StreamOptions, which hold paths and a read, build their
``from_options`` on ``parse_options``. Option names are matched loosely
(``loose_key``: case, ``_`` and ``-`` ignored), since Spark lower-cases option keys; errors name an option in
camelCase, or as the user spelled it (a variable, a flag). ``declared(cls)`` lists every setting of a value (groups
flattened) for the docs tables (``docs/option_tables.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import operator
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from s3io.errors import InvalidConfig
from s3io.units import parse_bool, parse_duration, parse_int, parse_optional_duration, parse_size

S = TypeVar("S", bound="Settings")
T = TypeVar("T")

_SETTING = "s3io.setting"
_GROUP = "s3io.group"


def loose_key(key: str) -> str:
    """An option name as options are matched: letter case, ``_`` and ``-`` ignored."""
    return key.replace("_", "").replace("-", "").lower()


def option_name(field: str) -> str:
    """The camelCase spelling of a field (``stall_timeout`` → ``stallTimeout``), as options and errors use it."""
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def snake_name(option: str) -> str:
    """The snake_case spelling of an option name (``stallTimeout`` → ``stall_timeout``), as keywords use it."""
    return "".join("_" + c.lower() if c.isupper() else c for c in option).lstrip("_")


# ----------------------------------------------------------------------------------------- parsers

Parser = Callable[[Any, str], Any]  # (the value given, the name to put in an error) -> the field's value


@dataclass(frozen=True, slots=True)
class Range:
    """The values a setting may take, declared once: the one parser and every constructor enforce it (``@settings``
    checks each field after the value is built, whatever the source), and the docs tables show it. ``low`` / ``high``
    bound it (None: unbounded on that side; ``above``: ``low`` itself excluded); ``unit`` is how the docs write a
    bound ("3 s"); ``none`` what None means where the setting's kind takes it (the docs: "or none (adaptive)")."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    unit: str = ""
    none: str = ""
    why: str = ""  # what an error adds after the range: the reason for it

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high

    def bound(self, value: float) -> str:
        """A bound as the docs and errors write it: ``3 s``; a size in KiB / MiB / GiB where it is whole."""
        if self.unit == "bytes":
            for size, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
                if value >= size and value % size == 0:
                    return f"{value // size:g} {name}"
            return f"{value:g} byte" + ("" if value == 1 else "s")
        return f"{value:g} {self.unit}" if self.unit else f"{value:g}"

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{'(' if self.above else '['}{self.bound(self.low)}, {self.bound(self.high)}]"
        if self.low is not None:
            return f"{'>' if self.above else '>='} {self.bound(self.low)}"
        return f"<= {self.bound(self.high)}" if self.high is not None else "any"

    def words(self, optional: bool) -> str:
        """The range as an error says it ("at least 1", "more than 0 or none")."""
        if self.low is not None and self.high is not None:
            low, high = self.bound(self.low), self.bound(self.high)
            text = f"between {low} and {high}" + (f", not {low}" if self.above else "")
        elif self.low is not None:
            text = f"{'more than' if self.above else 'at least'} {self.bound(self.low)}"
        else:
            text = f"at most {self.bound(self.high)}" if self.high is not None else "any value"
        text = f"{text} or none" if optional else text
        return f"{text} ({self.why})" if self.why else text

    def check(self, value: object, name: str, *, optional: bool = False) -> None:
        """The InvalidConfig every setting's range check raises (``name: must be at least 1, got 0``), for a value
        outside the range (None passes where ``optional``): for a function's argument that a setting also gives."""
        if value not in self and not (optional and value is None):
            raise InvalidConfig(f"{name}: must be {self.words(optional)}, got {value!r}")

    def docs(self, optional: bool) -> str:
        """The range as the docs tables write it (``optional``: the setting takes none as well)."""
        if not optional:
            return str(self)
        return f"{self} or none" + (f" ({self.none})" if self.none else "")


def at_least(low: float, *, unit: str = "", none: str = "", why: str = "") -> Range:
    """``low`` or more."""
    return Range(low, unit=unit, none=none, why=why)


def above(low: float, *, unit: str = "", none: str = "", why: str = "") -> Range:
    """More than ``low``."""
    return Range(low, above=True, unit=unit, none=none, why=why)


def between(low: float, high: float, *, unit: str = "", why: str = "") -> Range:
    """From ``low`` to ``high``, both included."""
    return Range(low, high, unit=unit, why=why)


@dataclass(frozen=True, slots=True)
class Kind:
    """A parser with the words the docs use for what it takes (``type``: "duration", "size", "bool", ...), the
    unit a bare number is in, the range every value of the kind has (a setting's own ``range`` replaces it), and
    for a kind of a few words its ``choices``: a value given by keyword that is none of them goes through ``parse``
    as an option's would (normalised, or the same error)."""

    type: str
    parse: Parser
    unit: str = ""
    range: Range | None = None
    choices: tuple[str, ...] = ()

    def __call__(self, value: Any, name: str) -> Any:
        return self.parse(value, name)


def _whole(value: Any, name: str) -> int:
    """A whole number of any sign (its range is the setting's to enforce)."""
    return parse_int(value, name=name, minimum=-(2**63))


BOOL = Kind("bool", lambda value, name: parse_bool(value, name=name))
DURATION = Kind("duration", lambda value, name: parse_duration(value, name=name), "s")
OPTIONAL_DURATION = Kind("duration or none", lambda value, name: parse_optional_duration(value, name=name), "s")
SIZE = Kind("size", lambda value, name: parse_size(value, name=name), "bytes")
INTEGER = Kind("integer", lambda value, name: parse_int(value, name=name))
TEXT = Kind("text", lambda value, name: str(value).strip())


def count(minimum: int = 1) -> Kind:
    """A whole number of at least ``minimum`` (its declared range: enforced on every value, shown in the docs)."""
    return Kind("integer", _whole, range=at_least(minimum))


def size_of(minimum: int) -> Kind:
    """A size of at least ``minimum`` bytes (its declared range: enforced on every value, shown in the docs)."""
    return Kind("size", SIZE.parse, "bytes", range=at_least(minimum, unit="bytes"))


def optional_count() -> Kind:
    """A whole number, or "none" / "off" for None."""

    def parse(value: Any, name: str) -> int | None:
        text = str(value).strip().lower()
        return None if text in ("none", "off") else parse_int(value, name=name)

    return Kind("integer or none", parse)


def optional_size() -> Kind:
    """A size, or "none" / "off" / "" for None."""

    def parse(value: Any, name: str) -> int | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
            return None
        return parse_size(value, name=name)

    return Kind("size or none", parse, "bytes")


def optional_text() -> Kind:
    """Text, or "none" / "" for None."""

    def parse(value: Any, name: str) -> str | None:
        text = str(value).strip()
        return None if text.lower() in ("", "none") else text

    return Kind("text or none", parse)


def choice(*choices: str, aliases: Mapping[str, str] | None = None) -> Kind:
    """One of ``choices`` (any case; ``-`` read as ``_``), or an alias of one."""
    other = dict(aliases or {})

    def parse(value: Any, name: str) -> str:
        text = str(value).strip().lower()
        text = other.get(text.replace("-", "_"), text)
        if text not in choices and text.replace("-", "_") not in choices:
            raise InvalidConfig(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
        return text if text in choices else text.replace("-", "_")

    return Kind(" | ".join(choices), parse, choices=choices)


def kind_of(parse: Parser) -> tuple[str, str]:
    """(the words the docs use for what a parser takes, the unit of a bare number)."""
    return (parse.type, parse.unit) if isinstance(parse, Kind) else ("text", "")


# ----------------------------------------------------------------------------------------- declarations


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting, declared once: ``name`` (the option name, camelCase: errors and docs spell it so), other
    ``aliases`` it is accepted under, its ``parse``r (a Kind gives its type), the Python ``keyword`` when it is not the
    field's name (a member of a flat group: ``stall_timeout`` for Timeouts.stall), a command-line ``flag`` (None: not a
    flag) with its ``help``, an environment variable ``env`` (None: the value's ``ENV_PREFIX`` + the keyword in upper
    case, if the value has one), the Spark session setting ``spark_conf`` whose value is its default for a Spark read
    (with ``spark_fallback``, used where the session's value is unknown), the S3A key ``s3a`` that sets it as it is
    (s3io.s3a derives its table's row from it), its ``unit`` for the docs, its ``range`` (a Range: enforced on every
    value and shown in the docs; None: its Kind's; text: a relation to another setting, which the value's
    ``__post_init__`` checks, shown in the docs only), and ``secret`` (kept out of repr, logs and plans)."""

    name: str
    parse: Parser
    aliases: tuple[str, ...] = ()
    keyword: str | None = None
    flag: str | None = None
    help: str = ""
    env: str | None = None
    spark_conf: str | None = None
    spark_fallback: str | None = None
    s3a: str | None = None
    unit: str = ""
    range: Range | str | None = None
    secret: bool = False
    docs: bool = True  # False: left out of the docs tables (an option only the project's own code gives)


def setting(
    name: str,
    parse: Parser,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    aliases: Iterable[str] = (),
    keyword: str | None = None,
    flag: str | None = None,
    help: str = "",
    env: str | None = None,
    spark_conf: str | None = None,
    spark_fallback: str | None = None,
    s3a: str | None = None,
    unit: str = "",
    range: Range | str | None = None,
    secret: bool = False,
    docs: bool = True,
) -> Any:
    """A dataclass field that is a setting (see Setting): the one way a setting is declared."""
    spec = Setting(
        name,
        parse,
        tuple(aliases),
        keyword,
        flag,
        help,
        env,
        spark_conf,
        spark_fallback,
        s3a,
        unit,
        range,
        secret,
        docs,
    )
    return dataclasses.field(  # type: ignore[call-overload]
        default=default, default_factory=default_factory, repr=not secret, metadata={_SETTING: spec}
    )


def range_of(spec: Setting) -> Range | None:
    """The range a setting's every value is held to: its own, else its Kind's (None: any value its parser gives)."""
    if isinstance(spec.range, Range):
        return spec.range
    return spec.parse.range if spec.range is None and isinstance(spec.parse, Kind) else None


def range_text(spec: Setting) -> str:
    """A setting's range as the docs write it ("" for none)."""
    declared_range = range_of(spec)
    if declared_range is None:
        return spec.range if isinstance(spec.range, str) else ""
    return declared_range.docs("or none" in kind_of(spec.parse)[0])


def group(cls: type[T], *, flat: bool = False) -> Any:
    """A dataclass field holding a smaller settings value (its defaults by default), whose settings are this value's
    too; ``flat``: its keywords are this value's own keywords and attributes as well."""
    return dataclasses.field(default_factory=cls, metadata={_GROUP: (cls, flat)})


@dataclass(frozen=True, slots=True)
class Declared:
    """A setting as a value holds it: the ``path`` of fields from the value to it (``("policy", "timeouts",
    "stall")``), its Python ``keyword``, its ``spec``, its default, its environment variable (resolved) and the class
    that declares it."""

    path: tuple[str, ...]
    keyword: str
    spec: Setting
    default: Any
    env: str | None
    owner: type

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.spec.name, *self.spec.aliases)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@functools.cache
def declared(cls: type) -> tuple[Declared, ...]:
    """Every setting of ``cls``, its groups' included, in field order."""
    return tuple(_walk(cls, (), getattr(cls, "ENV_PREFIX", None), top=True))


def _walk(cls: type, path: tuple[str, ...], prefix: str | None, *, top: bool) -> Iterable[Declared]:
    prefix = getattr(cls, "ENV_PREFIX", None) or prefix
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SETTING)
        if spec is not None:
            keyword = spec.keyword or (f.name if top else snake_name(spec.name))
            env = spec.env or (prefix + keyword.upper() if prefix else None)
            yield Declared((*path, f.name), keyword, spec, _default(f), env, cls)
        elif _GROUP in f.metadata:  # a flat group's members are keywords of this value: named by their option
            inner, flat = f.metadata[_GROUP]
            yield from _walk(inner, (*path, f.name), prefix, top=not flat)


@functools.cache
def _by_spelling(cls: type) -> dict[str, Declared]:
    return {loose_key(spelling): d for d in declared(cls) for spelling in d.spellings}


@functools.cache
def _flat_keywords(cls: type) -> dict[str, tuple[str, str]]:
    """{keyword: (group field, its field in the group)} for the members of ``cls``'s flat groups."""
    found: dict[str, tuple[str, str]] = {}
    for f in dataclasses.fields(cls):
        if _GROUP in f.metadata and f.metadata[_GROUP][1]:
            for member in dataclasses.fields(f.metadata[_GROUP][0]):
                spec = member.metadata.get(_SETTING)
                if spec is not None:
                    found[spec.keyword or snake_name(spec.name)] = (f.name, member.name)
    return found


@functools.cache
def _alias_keywords(cls: type) -> dict[str, tuple[str, Setting]]:
    """{an alias's keyword (its snake_case spelling): (the field, its setting)} for ``cls``'s own settings, so that
    a renamed setting's old keyword works where its old option name does (``lock_ttl`` for ``lease_ttl``)."""
    taken = {f.name for f in dataclasses.fields(cls)} | _flat_keywords(cls).keys()
    found: dict[str, tuple[str, Setting]] = {}
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SETTING)
        for alias in spec.aliases if spec is not None else ():
            if snake_name(alias) not in taken:
                found[snake_name(alias)] = (f.name, spec)
    return found


def _by_field(cls: type, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each alias's keyword replaced by its field's, its value parsed as the alias option's is
    (``path_style=True``: ``addressing="path"``); both given is an InvalidConfig."""
    aliases = _alias_keywords(cls)
    out = {k: v for k, v in kwargs.items() if k not in aliases}
    for key in kwargs.keys() & aliases.keys():
        field, spec = aliases[key]
        if field in out:
            raise InvalidConfig(f"{field} is given twice (also as {key}): give one")
        out[field] = spec.parse(kwargs[key], key)
    return out


def spellings(cls: type) -> tuple[str, ...]:
    """The option names (and aliases) ``cls`` takes, for "known options" lists."""
    return tuple(s for d in declared(cls) for s in d.spellings)


# ----------------------------------------------------------------------------------------- the base


class Settings:
    """Base of the settings values (made with ``@settings``): ``KIND`` is the word errors use ("policy", "store
    option"), ``ENV_PREFIX`` derives the variable of every setting that does not name one (None: only the declared
    ones are read)."""

    __slots__ = ()
    KIND: ClassVar[str] = "option"
    ENV_PREFIX: ClassVar[str | None] = None

    def replace(self: S, **changes: Any) -> S:
        """A copy with some fields (or a flat group's keywords, or an alias's keyword) changed, validated again."""
        changes = _by_field(type(self), changes)
        flat = _flat_keywords(type(self))
        own = {k: v for k, v in changes.items() if k not in flat}
        inner: dict[str, dict[str, Any]] = {}
        for key in changes.keys() & flat.keys():
            group_field, member = flat[key]
            inner.setdefault(group_field, {})[member] = changes[key]
        for group_field, values in inner.items():
            own[group_field] = own.get(group_field, getattr(self, group_field)).replace(**values)
        return dataclasses.replace(self, **own)  # type: ignore[type-var]

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The keywords the class takes: its fields and its flat groups' keywords in their place."""
        flat = _flat_keywords(cls)
        names: list[str] = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            members = [k for k, (g, _) in flat.items() if g == f.name]
            names.extend(members or [f.name])
        return tuple(names)

    # ------------------------------------------------------------------ the sources

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None, base: S | None = None) -> S:
        """The settings' variables (``S3IO_STALL_TIMEOUT=2s``) over ``base`` (default: the defaults); unset or blank
        ones keep it. A bad value is an InvalidConfig naming the variable."""
        environ = os.environ if environ is None else environ
        parsed = Parsed(cls)
        for d in declared(cls):
            if d.env is not None and str(environ.get(d.env, "")).strip():
                parsed.add(d, d.env, d.spec.parse(environ[d.env], d.env))
        return parsed.over(base if base is not None else cls())

    @classmethod
    def take_options(cls: type[S], values: Mapping[str, Any], base: S | None = None) -> tuple[S, dict[str, Any]]:
        """(the options ``values`` give over ``base`` — default: ``from_env()`` —, the entries no setting of ``cls``
        takes, untouched)."""
        parsed = parse_options(cls, values)
        return parsed.over(base if base is not None else cls.from_env()), parsed.rest

    @classmethod
    def from_options(cls: type[S], values: Mapping[str, Any], base: S | None = None) -> S:
        """``take_options``, where an option no setting takes is an InvalidConfig naming the known ones."""
        parsed = parse_options(cls, values)
        parsed.refuse_rest()
        return parsed.over(base if base is not None else cls.from_env())

    @classmethod
    def from_mapping(cls: type[S], values: Mapping[str, Any], base: S | None = None) -> S:
        """``from_options`` over ``base`` (default: the defaults, not the environment): the name Policy and
        EngineConfig have had for it."""
        return cls.from_options(values, base=base if base is not None else cls())

    @classmethod
    def resolve(cls: type[S], value: S | Mapping[str, object] | None) -> S:
        """The settings an argument names: None → the environment over the defaults; an instance → itself; a
        mapping of options → those options over the environment over the defaults."""
        if value is None:
            return cls.from_env()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_options(value)
        raise InvalidConfig(
            f"{cls.KIND}: expected an s3io {cls.__name__} or a mapping of options, got {type(value).__name__}"
        )

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, *, defaults: bool = True) -> None:
        """One command-line flag per setting that declares one (a bool that defaults to false is a switch).
        ``defaults=False`` leaves an absent flag unset (for a subcommand's copy of flags the main parser has too)."""
        for d in declared(cls):
            if d.spec.flag is None:
                continue
            extra: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
            if d.default is False:
                parser.add_argument(d.spec.flag, dest=d.keyword, action="store_true", help=d.spec.help, **extra)
            else:
                parser.add_argument(d.spec.flag, dest=d.keyword, metavar="VALUE", help=d.spec.help, **extra)

    @classmethod
    def from_args(cls: type[S], args: argparse.Namespace, base: S | None = None) -> S:
        """The flags ``add_arguments`` defined (unset ones left out) over ``base`` (default: ``from_env()``); a bad
        value is an InvalidConfig naming the flag."""
        parsed = Parsed(cls)
        for d in declared(cls):
            value = getattr(args, d.keyword, None) if d.spec.flag is not None else None
            if value is not None and value is not False:
                parsed.add(d, d.spec.flag or d.name, d.spec.parse(value, d.spec.flag))
        return parsed.over(base if base is not None else cls.from_env())

    def describe(self) -> str:
        """``name=value`` for every setting, in camelCase (for logs and reprs); secrets left out."""
        return ", ".join(f"{d.name}={_get(self, d.path)!r}" for d in declared(type(self)) if not d.spec.secret)


def settings(cls: type[S]) -> type[S]:
    """Make ``cls`` a frozen, slotted dataclass of settings; a flat group's keywords become keywords of its
    constructor and read-only attributes; an alias's keyword (snake_case) is a keyword of its setting too."""
    own_check = cls.__dict__.get("__post_init__")

    def __post_init__(self: Any) -> None:
        parse_choices(self)
        check_ranges(self)
        if own_check is not None:
            own_check(self)

    __post_init__.__doc__ = own_check.__doc__ if own_check is not None else check_ranges.__doc__
    cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
    made = dataclass(frozen=True, slots=True)(cls)
    flat = _flat_keywords(made)
    if flat or _alias_keywords(made):
        init = made.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs = _by_field(made, kwargs)
            inner: dict[str, dict[str, Any]] = {}
            for key in kwargs.keys() & flat.keys():
                group_field, keyword = flat[key]
                inner.setdefault(group_field, {})[keyword] = kwargs.pop(key)
            for group_field, values in inner.items():
                base = kwargs.get(group_field)
                kwargs[group_field] = (
                    base.replace(**values) if base is not None else _group_cls(made, group_field)(**values)
                )
            init(self, *args, **kwargs)

        __init__.__doc__ = init.__doc__
        made.__init__ = __init__  # type: ignore[misc]
        for key, (group_field, member) in flat.items():
            setattr(made, key, property(_reader(group_field, member), doc=f"``{group_field}.{member}``"))
    return made


@functools.cache
def _ranged(cls: type) -> tuple[tuple[str, str, Range, bool, bool], ...]:
    """(field, option name with its aliases, range, whether None is allowed — the kind takes it, or it is the default,
    "not given" —, whether the kind takes None) for each of ``cls``'s own settings that has a range."""
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SETTING)
        if spec is not None and (bounds := range_of(spec)) is not None:
            name = f"{spec.name} ({', '.join(spec.aliases)})" if spec.aliases else spec.name
            takes_none = "or none" in kind_of(spec.parse)[0]
            found.append((f.name, name, bounds, takes_none or f.default is None, takes_none))
    return tuple(found)


def check_ranges(value: Any) -> None:
    """Every declared range of a settings value, enforced on its own fields (its groups check theirs when built): an
    InvalidConfig naming the option, its range and the value (``Parsed.over`` renames the option as it was given)."""
    for field, name, bounds, none_allowed, takes_none in _ranged(type(value)):
        got = getattr(value, field)
        if not (got is None and none_allowed):
            bounds.check(got, name, optional=takes_none)


@functools.cache
def _chosen(cls: type) -> tuple[tuple[str, str, Kind, bool], ...]:
    """(field, option name, kind, whether None is allowed) for each of ``cls``'s own settings of a kind of choices."""
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SETTING)
        if spec is not None and isinstance(spec.parse, Kind) and spec.parse.choices:
            found.append((f.name, spec.name, spec.parse, "or none" in spec.parse.type or f.default is None))
    return tuple(found)


def parse_choices(value: Any) -> None:
    """A setting of a kind of choices given by keyword as none of them (``mode="Overwrite"``) is parsed as an option
    would be: normalised to its choice, or the InvalidConfig naming the choices."""
    for field, name, kind, none_allowed in _chosen(type(value)):
        got = getattr(value, field)
        if got not in kind.choices and not (got is None and none_allowed):
            object.__setattr__(value, field, kind.parse(got, name))


def check_setting(cls: type, name: str, value: Any) -> Any:
    """``value``, held to the declared range of ``cls``'s setting ``name`` (its option name) with the error that
    setting gives: for a public function's argument that is that setting (``binpack``'s ``max_partition_bytes``)."""
    for d in declared(cls):
        if d.name == name:
            for field, label, bounds, none_allowed, takes_none in _ranged(d.owner):
                if field == d.path[-1] and not (value is None and none_allowed):
                    bounds.check(value, label, optional=takes_none)
            return value
    raise KeyError(f"{cls.__name__} declares no setting {name!r}")


def _group_cls(cls: type, name: str) -> Any:
    return next(f.metadata[_GROUP][0] for f in dataclasses.fields(cls) if f.name == name)


def _reader(group_field: str, keyword: str) -> Callable[[Any], Any]:
    """The getter of a flat name (``policy.stall_timeout``): C's attrgetter, no Python frame (read per request)."""
    return operator.attrgetter(f"{group_field}.{keyword}")


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        value = getattr(value, name)
    return value


# ----------------------------------------------------------------------------------------- the one parser


class Parsed:
    """Settings parsed from one source, not yet applied: ``over(base)`` applies them together (a range error then
    names the option as the source spelled it); ``rest``: the entries no setting takes."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.changes: dict[tuple[str, ...], Any] = {}
        self.labels: dict[tuple[str, ...], tuple[str, str]] = {}  # path -> (option name, as given)
        self.rest: dict[str, Any] = {}

    def add(self, d: Declared, label: str, value: Any) -> None:
        self.changes[d.path] = value
        self.labels[d.path] = (d.name, label)

    def given(self, name: str) -> bool:
        """Whether the setting of the top-level field ``name`` was given."""
        return (name,) in self.changes

    def refuse_rest(self) -> None:
        """An InvalidConfig naming the first entry no setting takes, and the known names."""
        if self.rest:
            kind = getattr(self.cls, "KIND", "option")
            raise unknown_option(str(next(iter(self.rest))), spellings(self.cls), kind=kind)

    def over(self, base: T) -> T:
        try:
            return _apply(base, self.changes)
        except InvalidConfig as exc:
            text = str(exc)
            for name, label in self.labels.values():  # "name:" or "name (aliases):"
                if label != name and text.split(":", 1)[0].split(" (", 1)[0] == name:
                    raise InvalidConfig(f"{label}:{text.split(':', 1)[1]}") from None
            raise


def _apply(base: Any, changes: Mapping[tuple[str, ...], Any]) -> Any:
    """``base`` with the values at these paths changed, each group rebuilt once."""
    if not changes:
        return base
    own = {path[0]: value for path, value in changes.items() if len(path) == 1}
    inner: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, value in changes.items():
        if len(path) > 1:
            inner.setdefault(path[0], {})[path[1:]] = value
    for name, nested in inner.items():
        own[name] = _apply(getattr(base, name), nested)
    return dataclasses.replace(base, **own)


def parse_options(cls: type, values: Mapping[str, Any]) -> Parsed:
    """The one parser: the settings of ``cls`` (its groups' included) that ``values`` give, parsed, and the entries
    none takes. Two spellings of one setting with different values are an InvalidConfig; a parse error names the
    option as declared (its camelCase name, or the alias used)."""
    index = _by_spelling(cls)
    parsed = Parsed(cls)
    given: dict[tuple[str, ...], tuple[str, Any]] = {}
    for key, value in values.items():
        d = index.get(loose_key(str(key)))
        if d is None:
            parsed.rest[key] = value
            continue
        if d.path in given:
            if given[d.path][1] != value:
                raise InvalidConfig(
                    f"option {d.name} is given twice, as {given[d.path][0]!r} and {key!r}, with different values; "
                    "give it once"
                )
            continue
        given[d.path] = (str(key), value)
        spelling = next(s for s in d.spellings if loose_key(s) == loose_key(str(key)))
        parsed.add(d, spelling, d.spec.parse(value, spelling))
    return parsed


def find(cls: type, key: str) -> Declared | None:
    """The setting of ``cls`` an option name (any spelling) gives, or None."""
    return _by_spelling(cls).get(loose_key(str(key)))


def unknown_option(key: str, known: Iterable[str], *, kind: str = "option") -> InvalidConfig:
    """The error for an option nobody declares: the closest known name where one is close (a line a person reads
    whole), else every known one."""
    names = sorted(dict.fromkeys(known), key=str.lower)
    by_loose = {loose_key(n): n for n in names}
    close = difflib.get_close_matches(loose_key(key), list(by_loose), n=1, cutoff=0.75)
    if close:
        return InvalidConfig(f"unknown {kind} {key!r} (did you mean {by_loose[close[0]]}?); names are case-insensitive")
    return InvalidConfig(f"unknown {kind} {key!r}; known options (case-insensitive): {', '.join(names)}")
