"""Parse ``s3://bucket/prefix`` paths (s3a:// and s3n:// too) and Hadoop-style globs into listing prefixes and matchers.

Keys are taken literally (no percent-decoding), as Hadoop's S3A does. Glob syntax follows Hadoop's GlobPattern:
``*`` and ``?`` within one path segment, ``[abc]`` / ``[a-z]`` / ``[!a]`` / ``[^a]`` classes, ``{a,b}`` alternatives
(nested, may span ``/``), and ``\\`` to escape the next character.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from s3io.errors import InvalidConfig

SCHEMES = ("s3", "s3a", "s3n", "s3io")
URL_FORM = "s3://bucket/prefix (s3a:// and s3n:// are accepted too), e.g. s3://my-bucket/tables/events/"
MAX_GLOB_ALTERNATIVES = 1024

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?P<slashes>/{0,2})(?P<rest>.*)$", re.DOTALL)
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_GLOB_CHARS = frozenset("*?[{")

Segment = str | re.Pattern[str]  # a literal segment, or a compiled pattern for a segment with wildcards


@dataclass(frozen=True, slots=True)
class PathMatch:
    """How a listed key relates to the path that matched it."""

    root: str  # key prefix ("" or ending in "/") of the root directory: partition discovery starts here
    relative: str  # the part of the key that was not written literally: the hidden-name rule applies to it
    depth: int = 1  # path segments of the key below the root: 1 for the path itself or a file directly in it


@dataclass(frozen=True, slots=True)
class S3Path:
    """One user-given path: a bucket and a key prefix, possibly a glob."""

    bucket: str
    key: str
    alternatives: tuple[tuple[Segment, ...], ...]  # brace-expanded, each split into segments
    dir_only: bool  # the path ended with "/": it names directories, never a file of that name
    listing_prefixes: tuple[str, ...]  # the fewest literal key prefixes whose listings hold every match

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def is_glob(self) -> bool:
        return any(not isinstance(s, str) for alt in self.alternatives for s in alt) or len(self.alternatives) > 1

    def match(self, key: str) -> PathMatch | None:
        """Where ``key`` (an object key in this bucket) falls under this path, or None if it does not."""
        parts = key.split("/")
        for alt in self.alternatives:
            n = len(alt)
            if len(parts) < n or (len(parts) == n and self.dir_only):
                continue
            if all(_segment_matches(seg, part) for seg, part in zip(alt, parts, strict=False)):
                first_wild = next((i for i, seg in enumerate(alt) if not isinstance(seg, str)), n)
                root_parts = parts[:n] if len(parts) > n else parts[: n - 1]
                root = "".join(p + "/" for p in root_parts)
                return PathMatch(root=root, relative="/".join(parts[first_wild:]), depth=len(parts) - len(root_parts))
        return None


def parse_s3_url(url: str, *, option: str = "path") -> S3Path:
    """Parse one path; ``option`` names the option it came from, for error messages."""
    if not isinstance(url, str):
        raise InvalidConfig(f"{option}: expected a string of the form {URL_FORM}, got {url!r}")
    text = url.strip()
    match = _URL.match(text)
    if not match:
        raise InvalidConfig(f"{option}: {mask_userinfo(url)!r} has no scheme; expected {URL_FORM}")
    scheme = match.group("scheme").lower()
    if scheme not in SCHEMES:
        raise InvalidConfig(
            f"{option}: scheme {scheme + '://'!r} of {mask_userinfo(url)!r} is not supported; expected {URL_FORM}"
        )
    if match.group("slashes") != "//":
        raise InvalidConfig(f"{option}: {mask_userinfo(url)!r} is malformed; expected {URL_FORM}")
    bucket, _, key = match.group("rest").partition("/")
    if "@" in bucket:
        raise InvalidConfig(
            f"{option}: credentials inside the URL ({mask_userinfo(url)!r}) are not supported; "
            "use the accessKeyId/secretAccessKey options or the environment"
        )
    if not bucket:
        raise InvalidConfig(f"{option}: {url!r} has an empty bucket name; expected {URL_FORM}")
    if not _BUCKET.match(bucket):
        raise InvalidConfig(
            f"{option}: bucket {bucket!r} of {url!r} is not a valid bucket name "
            "(letters, digits, '.', '-', '_'; no glob characters); expected " + URL_FORM
        )
    dir_only = key.endswith("/")
    pattern = key[:-1] if dir_only else key
    expanded = [_split_segments(alt) for alt in _expand_braces(pattern, option=option, url=url)] if pattern else [[]]
    alternatives = tuple(tuple(_compile_segment(seg, option=option, url=url) for seg in alt) for alt in expanded)
    prefixes = sorted({_literal_prefix(alt, dir_only) for alt in expanded})
    kept: list[str] = []
    for prefix in prefixes:
        if not any(prefix.startswith(k) for k in kept):
            kept.append(prefix)
    return S3Path(bucket=bucket, key=key, alternatives=alternatives, dir_only=dir_only, listing_prefixes=tuple(kept))


def parse_paths(urls: Sequence[str], *, option: str = "paths") -> tuple[S3Path, ...]:
    """Parse several paths, naming the failing one by its position."""
    return tuple(parse_s3_url(u, option=f"{option}[{i}]" if len(urls) > 1 else option) for i, u in enumerate(urls))


def compile_name_glob(pattern: str, *, option: str = "pathGlobFilter") -> Callable[[str], bool]:
    """A predicate on file names (no "/") for Spark's ``pathGlobFilter``, with Hadoop GlobFilter syntax."""
    regexes = [_segment_regex(alt, option=option, url=pattern) for alt in _expand_braces(pattern, option, pattern)]
    combined = re.compile("|".join(f"(?:{r})" for r in regexes), re.DOTALL)

    def accepts(name: str) -> bool:
        return combined.fullmatch(name) is not None

    return accepts


def has_glob(text: str) -> bool:
    """True if ``text`` contains an unescaped glob character (or ends with a lone escape, which is malformed)."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            if i + 1 == len(text):
                return True
            i += 2
            continue
        if text[i] in _GLOB_CHARS:
            return True
        i += 1
    return False


def _segment_matches(segment: Segment, part: str) -> bool:
    return segment == part if isinstance(segment, str) else segment.fullmatch(part) is not None


def _literal_prefix(segments: list[str], dir_only: bool) -> str:
    """Literal start of every key an alternative matches: its text before the first unescaped wildcard."""
    text = "/".join(segments) + ("/" if dir_only and segments else "")
    head: list[str] = []
    i = 0
    while i < len(text) and text[i] not in _GLOB_CHARS:
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        head.append(text[i])
        i += 1
    return "".join(head)


def _split_segments(pattern: str) -> list[str]:
    """Split on unescaped "/"."""
    segments, current, i = [], [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            current.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "/":
            segments.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    segments.append("".join(current))
    return segments


def _compile_segment(segment: str, *, option: str, url: str) -> Segment:
    if not has_glob(segment):
        return _unescape(segment)
    return re.compile(_segment_regex(segment, option=option, url=url), re.DOTALL)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)


def _segment_regex(segment: str, *, option: str, url: str) -> str:
    """Regex for a brace-free glob segment."""
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "\\":
            if i + 1 >= len(segment):
                raise InvalidConfig(f"{option}: glob {url!r} ends with a lone '\\'; escape it as '\\\\'")
            out.append(re.escape(segment[i + 1]))
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end, cls = _char_class(segment, i, option=option, url=url)
            out.append(cls)
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _char_class(text: str, start: int, *, option: str, url: str) -> tuple[int, str]:
    """Translate ``[...]`` starting at ``start``; returns (index of the closing "]", regex)."""
    i = start + 1
    negate = i < len(text) and text[i] in "!^"
    if negate:
        i += 1
    body: list[str] = []
    while i < len(text) and text[i] != "]":
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            body.append(re.escape(text[i + 1]))
            i += 2
            continue
        body.append("-" if c == "-" else re.escape(c))
        i += 1
    if i >= len(text) or not body:
        raise InvalidConfig(
            f"{option}: unclosed or empty character class in glob {url!r}; write e.g. [abc], [a-z] or [!a], "
            "or escape '[' as '\\['"
        )
    return i, "[" + ("^" if negate else "") + "".join(body) + "]"


def _expand_braces(pattern: str, option: str, url: str) -> list[str]:
    """Expand ``{a,b}`` groups (nested ones too) into plain alternatives; escapes are kept for the next step."""
    results: list[str] = []
    pending = [pattern]
    while pending:
        text = pending.pop()
        group = _first_group(text, option=option, url=url)
        if group is None:
            results.append(text)
        else:
            open_at, close_at, parts = group
            pending.extend(text[:open_at] + part + text[close_at + 1 :] for part in reversed(parts))
        if len(results) + len(pending) > MAX_GLOB_ALTERNATIVES:
            raise InvalidConfig(
                f"{option}: glob {url!r} expands to more than {MAX_GLOB_ALTERNATIVES} alternatives; "
                "use fewer {{a,b}} groups or several paths"
            )
    return results


def _first_group(text: str, *, option: str, url: str) -> tuple[int, int, list[str]] | None:
    """The first top-level ``{...}``: its bounds and its comma-separated parts."""
    i, depth, open_at, parts, part_start = 0, 0, -1, [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            close = text.find("]", i + 1)
            i = close + 1 if close != -1 else len(text)
            continue
        if c == "{":
            if depth == 0:
                open_at, part_start, parts = i, i + 1, []
            depth += 1
        elif c == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                parts.append(text[part_start:i])
                return open_at, i, parts
        elif c == "," and depth == 1:
            parts.append(text[part_start:i])
            part_start = i + 1
        i += 1
    if depth > 0:
        raise InvalidConfig(f"{option}: unclosed '{{' in glob {url!r}; write {{a,b}} or escape '{{' as '\\{{'")
    return None


def mask_userinfo(text: str) -> str:
    """``scheme://user:secret@host`` with the credentials replaced by "***", for error messages and logs."""
    return re.sub(r"(://)[^/@\s]*@", r"\1***@", text)


def split_s3_url(url: str, *, require_key: bool = False) -> tuple[str, str]:
    """(bucket, key) of one object URL, taken literally (no glob); InvalidConfig names the accepted form."""
    match = _URL.match(url)
    if match is None or match.group("scheme").lower() not in SCHEMES or match.group("slashes") != "//":
        raise InvalidConfig(f"expected a URL like s3://bucket/key (or s3a://), got {mask_userinfo(url)!r}")
    bucket, _, key = match.group("rest").partition("/")
    if not bucket or not _BUCKET.match(bucket):
        raise InvalidConfig(f"the URL {mask_userinfo(url)!r} has no valid bucket; expected s3://bucket/key")
    if require_key and not key:
        raise InvalidConfig(f"the URL {mask_userinfo(url)!r} names a bucket but no object; expected s3://bucket/key")
    return bucket, key
