"""Relative links between report pages (a sweep's points, the runs of a comparison).

A link is written in the Markdown form `[text](href)`, which report.md-style files render as
is; `html_links` turns the same text into anchors in the HTML page, so one document model
serves both outputs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# After html.escape: `[text](href)` with a relative href (no scheme, no spaces or quotes).
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(((?![a-zA-Z][a-zA-Z0-9+.-]*:)[^()\s\"'<>]+)\)")


def link(text: str, href: str | None) -> str:
    """`[text](href)`, or the text alone without an href; brackets in the text would end the
    link early, so they become parentheses."""
    if not href:
        return text
    return "[" + text.replace("[", "(").replace("]", ")") + "](" + href + ")"


def rel_href(target: Path, page_dir: Path) -> str | None:
    """`target` relative to the folder of the page that links to it (POSIX separators), or
    None when it does not exist (a point written with --no-report)."""
    if not target.is_file():
        return None
    try:
        rel = os.path.relpath(target.resolve(), page_dir.resolve())
    except ValueError:  # another drive (Windows): no relative path
        return None
    return Path(rel).as_posix()


def html_links(page: str) -> str:
    """Anchors for the `[text](href)` links of a page written by document.to_html, in the
    page's body only (the embedded chart specs and scripts after </main> are left alone)."""
    body, sep, rest = page.partition("</main>")
    # The href was escaped with the rest of the text and holds no quote.
    body = _LINK.sub(lambda m: f'<a href="{m[2]}">{m[1]}</a>', body)
    return body + sep + rest
