"""A tiny document model rendered to both Markdown and HTML, so the two never disagree."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    align_left: int = 1  # leading columns that are labels (left-aligned); the rest are numbers


@dataclass
class Image:
    path: str  # relative to the report
    alt: str


@dataclass
class Document:
    title: str
    blocks: list[Any] = field(default_factory=list)

    def h(self, text: str, level: int = 2) -> None:
        self.blocks.append(Heading(text, level))

    def p(self, text: str) -> None:
        self.blocks.append(Para(text))

    def table(self, header: list[str], rows: list[list[str]], align_left: int = 1) -> None:
        if rows:
            self.blocks.append(Table(header, rows, align_left))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(Image(path, alt))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            out.append(
                "|"
                + "|".join(":---" if i < b.align_left else "---:" for i in range(len(b.header)))
                + "|"
            )
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({b.path})", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#1b1f24;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.3em;margin-top:1.6em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1.1em;margin-top:1.2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:.25em .6em}
th{background:#f6f8fa}
td.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #d0d7de;margin:.5em 0}
code{background:#f6f8fa;padding:0 .2em}
"""


def _inline(text: str) -> str:
    # Markdown backticks and bold are the only inline markup the report uses.
    esc = html.escape(text)
    parts = esc.split("`")
    esc = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = esc.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def to_html(doc: Document) -> str:
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Table):
            out.append(
                "<table><thead><tr>"
                + "".join(f"<th>{_inline(h)}</th>" for h in b.header)
                + "</tr></thead><tbody>"
            )
            for row in b.rows:
                cells = "".join(
                    f"<td>{_inline(c)}</td>"
                    if i < b.align_left
                    else f'<td class="n">{_inline(c)}</td>'
                    for i, c in enumerate(row)
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        elif isinstance(b, Image):
            out.append(f'<img src="{html.escape(b.path)}" alt="{html.escape(b.alt)}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
