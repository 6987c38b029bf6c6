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


def test_the_readme_quickstart_runs_as_written(tmp_path):
    """The first Python block of the README (comgra's API) trains, records and reads back;
    the watch() block runs with a model and data filled in."""
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    recorder_block, watch_block = blocks[0], blocks[1]
    watch_script = (
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss_fn = nn.functional.mse_loss\n"
        "data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]\n"
        + watch_block)
    read_back = ("from comgra_like.query import open_group\n"
                 "g = open_group('runs/my_experiment')\n"
                 "assert [t.trial_id for t in g.list_trials()] == ['baseline']\n"
                 "assert len(g.list_steps('baseline')) == 10\n")
    for script in (recorder_block + read_back, watch_script):
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=False,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
