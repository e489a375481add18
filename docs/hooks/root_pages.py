"""MkDocs hook: README.md, CHANGELOG.md and CONTRIBUTING.md at the repository's root are pages of the site.

README.md is the home page. Links between these files and docs/ are rewritten to the site's paths, so each file
reads right both where the repository is browsed and on the site, and is written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "contributing.md"}


def site_links(markdown: str) -> str:
    """``](docs/x.md)`` -> ``](x.md)``, ``](CHANGELOG.md)`` -> ``](changelog.md)``: links as the site lays pages out."""
    markdown = markdown.replace("](docs/", "](")
    for source, page in ROOT_PAGES.items():
        markdown = markdown.replace(f"]({source})", f"]({page})")
    return markdown


def on_files(files: Files, config: Any) -> Files:
    """Add the root pages, generated from the files themselves."""
    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, content=site_links((ROOT / source).read_text())))
    return files
