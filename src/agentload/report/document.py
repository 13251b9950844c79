"""A tiny document model rendered to both Markdown and HTML, so the two never disagree.

The HTML page is self-contained: charts are plotly specs drawn by plotly.js, which is embedded
once per page (gzip + base64, unpacked by the browser's DecompressionStream), so a copy of
report.html alone works offline. Markdown shows a chart as its PNG when there is one.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import re
from dataclasses import dataclass, field
from typing import Any

import orjson


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
class Chart:
    spec: dict[str, Any]  # plotly {"data", "layout"}
    png: str | None = None  # relative path of a static rendering, for report.md


@dataclass
class Warn:
    text: str


@dataclass
class Row:
    """Blocks side by side in HTML (one after the other in Markdown)."""

    parts: list[list[Any]]


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

    def chart(self, spec: dict[str, Any] | None, png: str | None = None) -> None:
        if spec is not None:
            self.blocks.append(Chart(spec, png))

    def warn(self, text: str) -> None:
        self.blocks.append(Warn(text))

    def row(self, *parts: Document) -> None:
        """Side by side: the blocks of each sub-document form one column."""
        self.blocks.append(Row([p.blocks for p in parts if p.blocks]))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    _md_blocks(doc.blocks, out)
    return "\n".join(out).rstrip() + "\n"


def _md_blocks(blocks: list[Any], out: list[str]) -> None:
    for b in blocks:
        if isinstance(b, Row):
            for part in b.parts:
                _md_blocks(part, out)
        elif isinstance(b, Warn):
            out += [f"> **warning:** {b.text}", ""]
        elif isinstance(b, Chart):
            if b.png:
                alt = b.png.rsplit("/", 1)[-1].rsplit(".", 1)[0].replace("_", " ")
                out += [f"![{alt}]({b.png})", ""]
        elif isinstance(b, Heading):
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


_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1b1f24;
line-height:1.45;display:grid;grid-template-columns:210px minmax(0,1fr)}
nav{position:sticky;top:0;height:100vh;overflow-y:auto;padding:1em .8em;background:#f6f8fa;
border-right:1px solid #d0d7de;font-size:.85em}
nav a{display:block;color:#0969da;text-decoration:none;padding:.15em 0;white-space:nowrap;
overflow:hidden;text-overflow:ellipsis}
nav a.l3{padding-left:1em;color:#57606a}
main{padding:0 1.5em 3em;max-width:1500px}
h1{font-size:1.5em;border-bottom:2px solid #d0d7de;padding-bottom:.3em}
h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1.05em;margin-top:1.2em}
.tw{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.88em}
th,td{border:1px solid #d0d7de;padding:.2em .55em;white-space:nowrap}
th{background:#f6f8fa}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.row{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}
.row>div{min-width:0;max-width:100%}
.chart{width:100%;min-height:340px;border:1px solid #eaeef2;margin:.5em 0}
.charts2{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:0 1em}
.warn{background:#fff8c5;border:1px solid #d4a72c;padding:.4em .8em;margin:.5em 0;
border-radius:4px}
img{max-width:100%;border:1px solid #d0d7de;margin:.5em 0}
code{background:#f6f8fa;padding:0 .2em}
@media (max-width:900px){body{display:block}nav{position:static;height:auto}}
"""

# Unpacks plotly.js, then draws every chart; sets data-charts on <body> when done (or
# "error"), so a page test can wait for it.
_BOOT = """
(async function(){
  try {
    const b64 = document.getElementById('plotly-js').textContent.trim();
    const bin = atob(b64); const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    const js = await new Response(stream).text();
    const s = document.createElement('script'); s.text = js; document.head.appendChild(s);
    const cfg = {responsive: true, displaylogo: false};
    for (const el of document.querySelectorAll('div.chart')) {
      const spec = JSON.parse(document.getElementById(el.dataset.spec).textContent);
      await Plotly.newPlot(el, spec.data, spec.layout, cfg);
    }
    document.body.dataset.charts = 'drawn';
  } catch (e) {
    document.body.dataset.charts = 'error';
    console.error('agentload report: charts not drawn: ' + e);
  }
})();
"""


@functools.cache
def plotly_js_packed() -> str:
    """plotly.js from the plotly package, gzip + base64 (about 2 MB instead of 4.8 MB)."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), 9, mtime=0)).decode()


def _inline(text: str) -> str:
    # Markdown backticks and bold are the only inline markup the report uses.
    esc = html.escape(text)
    parts = esc.split("`")
    esc = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = esc.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def _anchor(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    a, i = base, 2
    while a in used:
        a, i = f"{base}-{i}", i + 1
    used.add(a)
    return a


class _Html:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.toc: list[tuple[int, str, str]] = []
        self.anchors: set[str] = set()
        self.specs: list[str] = []

    def blocks(self, blocks: list[Any]) -> None:
        for b in blocks:
            self.block(b)

    def block(self, b: Any) -> None:
        o = self.out
        if isinstance(b, Heading):
            a = _anchor(b.text, self.anchors)
            if b.level <= 3:
                self.toc.append((b.level, a, b.text))
            o.append(f'<h{b.level} id="{a}">{_inline(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            o.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Warn):
            o.append(f'<div class="warn"><b>warning:</b> {_inline(b.text)}</div>')
        elif isinstance(b, Table):
            self.table(b)
        elif isinstance(b, Image):
            o.append(f'<img src="{html.escape(b.path)}" alt="{html.escape(b.alt)}">')
        elif isinstance(b, Chart):
            sid = f"spec{len(self.specs)}"
            # "</" inside a <script> would end it: escape the slash (valid JSON).
            self.specs.append(
                f'<script type="application/json" id="{sid}">'
                + orjson.dumps(b.spec, option=orjson.OPT_SERIALIZE_NUMPY)
                .decode()
                .replace("</", "<\\/")
                + "</script>"
            )
            o.append(f'<div class="chart" data-spec="{sid}"></div>')
        elif isinstance(b, Row):
            o.append('<div class="row">')
            for part in b.parts:
                o.append("<div>")
                self.blocks(part)
                o.append("</div>")
            o.append("</div>")

    def table(self, b: Table) -> None:
        self.out.append(
            '<div class="tw"><table><thead><tr>'
            + "".join(f"<th>{_inline(h)}</th>" for h in b.header)
            + "</tr></thead><tbody>"
        )
        for row in b.rows:
            cells = "".join(
                f"<td>{_inline(c)}</td>" if i < b.align_left else f'<td class="n">{_inline(c)}</td>'
                for i, c in enumerate(row)
            )
            self.out.append(f"<tr>{cells}</tr>")
        self.out.append("</tbody></table></div>")


def to_html(doc: Document) -> str:
    body = _Html()
    body.blocks(doc.blocks)
    toc = "".join(
        f'<a class="l{lvl}" href="#{a}">{html.escape(t.replace("`", ""))}</a>'
        for lvl, a, t in body.toc
    )
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<nav><b>Contents</b>{toc}</nav><main>",
        f"<h1>{html.escape(doc.title)}</h1>",
        *body.out,
        "</main>",
    ]
    if body.specs:
        out += [
            *body.specs,
            f'<script type="application/octet-stream" id="plotly-js">{plotly_js_packed()}</script>',
            f"<script>{_BOOT}</script>",
        ]
    else:
        out.append("<script>document.body.dataset.charts = 'drawn';</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
