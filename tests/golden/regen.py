"""Rewrite the golden files (``make goldens``); review the diff before committing it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from golden.cases import BUILD, GOLDEN, all_cases, render_case  # noqa: E402


def main() -> int:
    shutil.rmtree(BUILD, ignore_errors=True)
    cases = all_cases()
    for old in GOLDEN.iterdir():
        if old.is_dir() and old.name not in cases and not old.name.startswith(("_", ".")):
            shutil.rmtree(old)
    for case in cases:
        folder = GOLDEN / case
        folder.mkdir(exist_ok=True)
        for name, text in render_case(case).items():
            (folder / name).write_text(text, encoding="utf-8")
        print(f"tests/golden/{case}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
