"""Every rendering of every golden case equals its committed file byte for byte (``make goldens`` rewrites them)."""

from __future__ import annotations

import pytest

from golden.cases import GOLDEN, WIDTHS, all_cases, render_case


@pytest.mark.parametrize("case", all_cases())
def test_rendering_matches_golden(case):
    got = render_case(case)
    folder = GOLDEN / case
    assert folder.is_dir(), f"no goldens for {case}: run `make goldens` and review the new files"
    assert sorted(p.name for p in folder.iterdir()) == sorted(got), "golden files differ from the renderings made"
    for name, text in got.items():
        want = (folder / name).read_text(encoding="utf-8")
        assert text == want, f"{case}/{name} changed: run `make goldens` and review the diff"


def test_text_goldens_fit_their_width():
    for case in all_cases():
        for width in WIDTHS:
            path = GOLDEN / case / f"text-{width}.txt"
            if path.exists():
                lines = path.read_text(encoding="utf-8").splitlines()
                assert max(map(len, lines)) <= width, f"{path.name} of {case} has a line wider than {width}"
