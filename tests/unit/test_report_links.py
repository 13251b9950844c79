"""Links between report pages: Markdown links become anchors in the HTML body only, relative
hrefs only."""

from __future__ import annotations

from pathlib import Path

from agentload.report.document import Document, to_html, to_markdown
from agentload.report.links import html_links, link, rel_href
from agentload.report.multi import default_labels, parse_labels


def test_links_in_tables_become_anchors_and_specs_stay(tmp_path: Path) -> None:
    d = Document("t")
    d.table(["load", "x"], [[link("1", "c0001/report.html"), "a"], [link("2", None), "b"]])
    d.p("see [the site](https://example.org) and [x](javascript:alert(1))")
    d.chart({"data": [{"type": "scatter", "name": "[a](b.html)"}], "layout": {}})
    md = to_markdown(d)
    assert "| [1](c0001/report.html) | a |" in md and "| 2 | b |" in md
    page = html_links(to_html(d))
    assert '<td><a href="c0001/report.html">1</a></td>' in page
    # Only relative links: a scheme stays text, and chart specs are never touched.
    assert page.count("<a href=") == 1 + page.count('class="l')
    assert "[the site](https://example.org)" in page and '"name":"[a](b.html)"' in page


def test_link_text_brackets_and_missing_targets(tmp_path: Path) -> None:
    assert link("a[1]", "r.html") == "[a(1)](r.html)"
    (tmp_path / "p" / "c0001").mkdir(parents=True)
    (tmp_path / "p" / "c0001" / "report.html").write_text("x")
    (tmp_path / "cmp").mkdir()
    target = tmp_path / "p" / "c0001" / "report.html"
    assert rel_href(target, tmp_path / "cmp") == "../p/c0001/report.html"
    assert rel_href(tmp_path / "p" / "c0002" / "report.html", tmp_path) is None


def test_labels(tmp_path: Path) -> None:
    a, b = tmp_path / "x" / "run", tmp_path / "y" / "run"
    assert default_labels([a, b]) == ["x/run", "y/run"]
    assert default_labels([a, tmp_path / "z"]) == ["run", "z"]
    assert default_labels([a, a]) == ["run #1", "run #2"]
    assert parse_labels("p, q", 2) == ["p", "q"]
    assert parse_labels(None, 3) is None


def test_runs_of_both_load_kinds_get_a_chart_set_each(tmp_path: Path) -> None:
    from agentload.report.multi import Series, compare_charts, compare_document

    def row(kind: str, load: float, ttft: float) -> dict:
        return {kind: load, "dir": "c0001", "ttft_p50": ttft, "ttft_p90": 2 * ttft}

    closed = Series("sw", tmp_path / "sw", True, "concurrency", [row("concurrency", 1, 0.1),
                    row("concurrency", 4, 0.4)], {})  # fmt: skip
    opened = Series("open", tmp_path / "open", False, "rate", [row("rate", 0.5, 0.2)], {})
    figs = compare_charts([closed, opened])
    assert [f["layout"]["title"]["text"] for f in figs] == [
        "TTFT p50 (solid) and p90 (dashed) against concurrency",
        "TTFT p50 (solid) and p90 (dashed) against rate",
    ]
    assert figs[0]["data"][1]["y"] == [0.2, 0.8] and figs[1]["data"][0]["x"] == [0.5]
    md = to_markdown(compare_document([closed, opened], tmp_path))
    # No report.html beside either: the load value is plain text, named by its kind.
    assert "| run | load | TTFT p50 | TTFT p90 |" in md
    assert "| sw | concurrency 4 | 400 ms | 800 ms |" in md and "| open | rate 0.5 |" in md
