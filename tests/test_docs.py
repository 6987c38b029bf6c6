"""The README stays a page for users and every link of it and of docs/ leads somewhere.

A moved section, a renamed page or a screenshot not taken would otherwise show up as a
dead link on the project's front page.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_targets(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code blocks hold no links
    return [t for t in LINK.findall(text)
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_and_image_exists():
    dead = []
    for page in PAGES:
        for target in _relative_targets(page):
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_the_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    head = text[:1500]
    assert "bash scripts/dev.sh gui" in head and "bash scripts/dev.sh test" in head


def test_screenshots_in_the_readme_are_small_pngs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    shots = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert len(shots) >= 5
    for shot in shots:
        data = (ROOT / shot).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", shot
        assert len(data) <= 250_000, f"{shot} is {len(data)} bytes"
