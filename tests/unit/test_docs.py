"""The documentation holds together (issue 46, item 15): the README stays a newcomer's page, every fact it
once held is still in it or in a page of docs/ (tests/unit/doc_facts.txt), every docs/ page can be reached
from the README, and every relative link in them leads to a file, and to a heading, that is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FACTS = ROOT / "tests" / "unit" / "doc_facts.txt"
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def flat(text: str) -> str:
    return " ".join(text.split())


def facts() -> list[str]:
    return [line for line in FACTS.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]


def test_the_readme_is_a_first_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    # The Quickstart is two commands, and only those.
    quick = text.split("## Quickstart", 1)[1].split("```", 2)[1]
    assert [line.split("#")[0].strip() for line in quick.strip().splitlines()] == ["make demo", "make test"]
    # One example for each of the five commands a newcomer runs.
    for command in ("collect", "report", "diff", "gate", "dashboard"):
        assert re.search(rf"^tracelens {command} ", text, re.M), command


def test_every_fact_of_the_old_readme_is_still_documented():
    held = " ".join(flat(page.read_text(encoding="utf-8")) for page in PAGES)
    listed = facts()
    assert len(listed) > 500 and len(set(listed)) == len(listed)
    missing = [fact for fact in listed if flat(fact) not in held]
    assert not missing, "no longer in README.md or docs/ (move it, or update tests/unit/doc_facts.txt):\n" + \
        "\n".join(missing)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.split("#")[0]).resolve() for target in _links(README)}
    assert [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked] == []


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [a or b for a, b in LINK.findall(text) if not re.match(r"[a-z]+:", a or b)]


def _anchors(page: Path) -> set[str]:
    """GitHub's ids for the headings of ``page``: lower case, punctuation dropped, spaces as hyphens, a
    repeated one numbered."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in set(_anchors(dest)):
            broken.append(target)
    assert not broken, broken
