"""MkDocs hooks: the repository's Markdown, as a forge or an editor shows it, is the site.

README.md becomes the home page and benchmarks/README.md the results page, and
every relative link - written as a path in the repository, such as
``docs/fetch.md`` in README.md or ``../benchmarks/README.md#pool`` in a page of
docs/ - is pointed at the page the site makes of that file.  A link to any other
file is left as written, so that ``mkdocs build --strict`` reports it: the site
has only what docs/ and these two pages hold.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent

#: Files outside docs/ that the site shows: repository path -> page.
OUTSIDE_DOCS = {"README.md": "index.md", "benchmarks/README.md": "benchmarks.md"}
_PAGE_OF_SOURCE = {page: source for source, page in OUTSIDE_DOCS.items()}

#: An inline link or image: ](target#anchor)
_LINK = re.compile(r"(\]\()([^)\s#]*)(#[^)\s]*)?(\))")


def on_files(files: Files, config: Any) -> Files:
    for source, page in OUTSIDE_DOCS.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files


def site_path(repository_path: str) -> str | None:
    """The site's page (or file) for a repository path, if the site has one."""
    if repository_path in OUTSIDE_DOCS:
        return OUTSIDE_DOCS[repository_path]
    if repository_path.startswith("docs/"):
        return repository_path.removeprefix("docs/")
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    here = page.file.src_uri
    source = _PAGE_OF_SOURCE.get(here, f"docs/{here}")

    def point(match: re.Match[str]) -> str:
        target = match.group(2)
        if not target or "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        found = site_path(posixpath.normpath(posixpath.join(posixpath.dirname(source), target)))
        if found is None:
            return match.group(0)
        relative = posixpath.relpath(found, posixpath.dirname(here) or ".")
        return f"{match.group(1)}{relative}{match.group(3) or ''}{match.group(4)}"

    return _LINK.sub(point, markdown)
