"""The fenced code blocks of the project's markdown pages, each with the heading it follows, for tests that run them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its page (relative to the repository's root), the heading above it, its language, its
    first line's number and its text."""

    page: str
    heading: str
    language: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(page: str) -> list[CodeBlock]:
    """Every fenced block of ``page`` (a path relative to the repository's root), in order."""
    blocks: list[CodeBlock] = []
    heading, language, start, body = "", None, 0, []
    for number, line in enumerate((ROOT / page).read_text().splitlines(), start=1):
        if language is None:
            fence = FENCE.match(line)
            if fence:
                language, start, body = fence.group(1), number + 1, []
            elif line.startswith("#"):
                heading = line
        elif line.startswith("```"):
            blocks.append(CodeBlock(page, heading, language, start, "\n".join(body) + "\n"))
            language = None
        else:
            body.append(line)
    assert language is None, f"{page}: a code block opened at line {start} is never closed"
    return blocks


def block_under(page: str, heading: str, language: str) -> CodeBlock:
    """The one block of ``language`` under ``heading`` (the heading line as written, with its #s)."""
    found = [b for b in code_blocks(page) if b.heading == heading and b.language == language]
    assert len(found) == 1, f"{page}: expected one {language} block under {heading!r}, found {len(found)}"
    return found[0]
