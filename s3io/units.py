"""Parse human-written durations ("250ms", "5s", "2m") and sizes ("128MB", "64KiB") with errors that teach the form."""

from __future__ import annotations

import re

from s3io.errors import InvalidConfig

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)
_DURATION_SCALE = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_SCALE = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    for _suffix in (_p, _p + "b", _p + "ib", _p + "i"):
        _SIZE_SCALE[_suffix] = 1024**_i

DURATION_FORM = 'a number of seconds or a number with a unit, e.g. "250ms", "5s", "2m", "1h"'
SIZE_FORM = 'a number of bytes or a number with a unit, e.g. "65536", "64KiB", "128MB", "1g" (binary units)'


def parse_duration(value: str | float | int, *, name: str) -> float:
    """Seconds from a duration; ``name`` is the option being parsed, for the error message."""
    if isinstance(value, bool):
        raise InvalidConfig(f"{name}: expected {DURATION_FORM}, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise InvalidConfig(f"{name}: expected {DURATION_FORM}, got {value!r}")
        unit = match.group(2).lower() if match.group(2) else None
        seconds = float(match.group(1)) * _DURATION_SCALE[unit]
    if seconds < 0:
        raise InvalidConfig(f"{name}: must not be negative, got {value!r}")
    return seconds


def parse_optional_duration(value: str | float | int | None, *, name: str) -> float | None:
    """Like parse_duration, but "none", "off" and "" (or None) mean no limit."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
        return None
    return parse_duration(value, name=name)


def parse_size(value: str | int, *, name: str) -> int:
    """Bytes from a size; k/m/g/t are binary multiples (as Spark reads "128m")."""
    if isinstance(value, bool):
        raise InvalidConfig(f"{name}: expected {SIZE_FORM}, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise InvalidConfig(f"{name}: expected {SIZE_FORM}, got {value!r}")
        size = int(float(match.group(1)) * _SIZE_SCALE[(match.group(2) or "").lower()])
    if size < 0:
        raise InvalidConfig(f"{name}: must not be negative, got {value!r}")
    return size


def parse_int(value: str | int, *, name: str, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise InvalidConfig(f"{name}: expected a whole number, got {value!r}") from None
    if number < minimum:
        raise InvalidConfig(f"{name}: must be at least {minimum}, got {value!r}")
    return number


def parse_bool(value: str | bool, *, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise InvalidConfig(f"{name}: expected true or false, got {value!r}")
