"""Every relative link in the Markdown docs points at a file that exists, and at a heading that exists
when it names one (`file.md#heading`, slugged as GitHub does)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md",
        ROOT / "bench" / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading.

    >>> slug("Safe by default (`app.py` flags)")
    'safe-by-default-apppy-flags'
    >>> slug("Does the default run learn?")
    'does-the-default-run-learn'
    """
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    in_code = False
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links() -> list[str]:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no heading #{anchor}")
    return broken


def test_docs_exist():
    assert all(doc.exists() for doc in DOCS), [str(d) for d in DOCS if not d.exists()]


def test_relative_links_resolve():
    assert broken_links() == []


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < 200, f"README.md has {lines} lines; move detail into docs/ and link it"
