"""No module in pipeline/ or ui/ grows past 500 lines: a file that long holds more than one job, and the
tree stops telling a newcomer where a change goes. Split it by what each part does (see CONTRIBUTING.md)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 500


def test_no_module_is_over_500_lines():
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for folder in ("pipeline", "ui") for path in sorted((ROOT / folder).rglob("*.py"))}
    assert len(sizes) > 30  # the walk found the modules
    too_long = {path: lines for path, lines in sizes.items() if lines > MOST_LINES}
    assert not too_long, f"Modules over {MOST_LINES} lines (split each by what its parts do): {too_long}"
