"""Every relative link in the README and docs/ opens a file that exists, at a heading that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "config" / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors (lower case, punctuation but '-' and '_' dropped, spaces to '-')
    and explicit ``<a id="...">`` ones."""
    out = set(re.findall(r'<a id="([^"]+)"', page.read_text()))
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return bad


def test_anchor_rule_matches_githubs():
    page = ROOT / "docs" / "models.md"
    assert {"dtype-auto", "api-models", "cache-retries-refusals"} <= anchors(page)
    assert "the-length-confound" in anchors(ROOT / "docs" / "probes" / "ktd.md")
    assert "no-such-heading" not in anchors(page)


def test_every_relative_link_resolves():
    assert len(PAGES) > 10
    bad = [b for page in PAGES for b in broken_links(page)]
    assert bad == []


def test_the_headlines_pointer_to_the_fragile_checks_resolves():
    from memaudit.stats.headline import FRAGILE_CHECKS

    path, _, anchor = FRAGILE_CHECKS.partition("#")
    assert anchor and anchor in anchors(ROOT / path)


def test_every_page_a_report_caption_names_exists():
    """A caption names the docs page that explains its figure or table (``See docs/<page>.md``)."""
    captions = sorted((ROOT / "workflow" / "report").glob("*.rst"))
    named = {(c.name, p) for c in captions for p in re.findall(r"docs/[\w/.-]+?\.md", c.read_text())}
    assert ("summary_selection.rst", "docs/statistics.md") in named
    assert [(c, p) for c, p in sorted(named) if not (ROOT / p).exists()] == []
