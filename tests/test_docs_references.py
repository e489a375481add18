"""The documents name real files: every test, harness and module path the README (its claims table: the tests that
back each promise), CONTRIBUTING.md, docs/ and benchmarks/README.md name in backticks exists, so a renamed test or a
moved harness cannot leave a claim pointing at nothing."""

from __future__ import annotations

import re

from support.doc_blocks import ROOT

DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
# `tests/test_x.py`, `testbed/x.py`, `benchmarks/x.py`... and a bare `test_x.py` (a claims cell's second test)
NAMED_FILE = re.compile(r"`((?:tests|testbed|benchmarks|examples|s3io|spark_ext)/[\w./-]+\.py|test_\w+\.py)(?:::\w+)?`")


def test_every_file_the_documents_name_exists() -> None:
    named = {
        (document.relative_to(ROOT).as_posix(), match.group(1))
        for document in DOCUMENTS
        for match in NAMED_FILE.finditer(document.read_text())
    }
    missing = sorted(
        (document, name)
        for document, name in named
        if not (ROOT / ("tests/" + name if name.startswith("test_") else name)).exists()
    )
    assert len(named) > 50  # the pattern finds what the documents name
    assert missing == [], f"documents name files that do not exist (renamed or moved?): {missing}"
