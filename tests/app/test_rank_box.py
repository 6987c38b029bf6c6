"""Rank selectors show only when a trial has ranks to choose from.

Every page's rank box starts hidden by its inline style, and the pages' callbacks show
it with ``selectors.rank_box_style``. A Bootstrap display class on the box (``d-flex``
is ``display: flex !important``) beats that inline ``display: none``: the Tensors and
Modules pages showed an empty "Ranks" dropdown on every recording of one process.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from comgra_like.app import selectors
from comgra_like.app.data import AppData
from comgra_like.app.pages import PAGES

EXAMPLE_RUN = Path(__file__).resolve().parents[2] / "example_runs" / "tutorial"
#: Bootstrap 5's display utilities, all !important.
BOOTSTRAP_DISPLAY = re.compile(r"(^|\s)d(-[a-z]+)?-(none|inline|inline-block|block|grid|"
                               r"inline-grid|table|table-row|table-cell|flex|inline-flex)"
                               r"(\s|$)")


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    if children is None or isinstance(children, (str, int, float)):
        return
    for child in children if isinstance(children, (list, tuple)) else [children]:
        yield from _walk(child)


def _rank_boxes(page):
    return [c for c in _walk(page.layout())
            if isinstance(getattr(c, "id", None), str) and c.id.endswith("rank-box")]


@pytest.mark.parametrize("page", [p for p in PAGES if p.name in
                                  ("Tensors", "Modules", "Metrics", "Notes")],
                         ids=lambda p: p.name)
def test_each_rank_box_starts_hidden_and_nothing_overrides_its_style(page):
    [box] = _rank_boxes(page)
    assert box.style.get("display") == "none"
    assert not BOOTSTRAP_DISPLAY.search(getattr(box, "className", "") or ""), box.className


def test_no_other_page_has_one():
    assert {p.name for p in PAGES if _rank_boxes(p)} == {"Tensors", "Modules", "Metrics",
                                                         "Notes"}


def test_the_style_follows_the_options():
    assert selectors.rank_box_style([]) == {"display": "none"}
    assert selectors.rank_box_style(selectors.rank_options([3])) == {"display": "none"}
    shown = selectors.rank_box_style(selectors.rank_options([0, 1]))
    assert shown == {"display": "flex"}


def test_the_example_run_was_recorded_by_one_process_so_no_ranks_show():
    data = AppData(EXAMPLE_RUN)
    for trial in data.trial_ids():
        assert selectors.rank_options(data.ranks(trial)) == [], trial
