"""The controls shared by pages (app/controls/): the one rank selector, as each of the
four pages configures it (the options, defaults and boxes each page had before it was
one component), and the "already shown" helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app import create_app, selectors
from comgra_like.app.controls import rank_selector as rs
from comgra_like.app.controls.shown import if_changed, nothing, unchanged
from comgra_like.app.pages import metrics, modules, notes
from dash import no_update

EXAMPLE_RUN = Path(__file__).resolve().parents[3] / "example_runs" / "tutorial"

SELECTORS = {"Tensors": selectors.RANKS, "Modules": modules.RANKS,
             "Metrics": metrics.RANKS, "Notes": notes.RANKS}


def labels(options):
    return [(o["label"], o["value"]) for o in options]


def test_each_page_offers_its_choices_in_its_order():
    ranks = [0, 1, 2]
    assert labels(selectors.RANKS.options(ranks)) == [
        ("all ranks merged", rs.MERGED), ("rank 0", 0), ("rank 1", 1), ("rank 2", 2)]
    assert labels(modules.RANKS.options(ranks)) == [
        ("rank 0", 0), ("rank 1", 1), ("rank 2", 2),
        ("all ranks side by side", rs.EVERY_RANK), ("all ranks merged", rs.MERGED)]
    assert labels(metrics.RANKS.options(ranks)) == [
        ("all ranks side by side", rs.EVERY_RANK), ("rank 0", 0), ("rank 1", 1),
        ("rank 2", 2)]
    assert labels(notes.RANKS.options(ranks)) == [
        ("every rank", rs.EVERY_RANK), ("rank 0", 0), ("rank 1", 1), ("rank 2", 2)]
    for selector in SELECTORS.values():
        assert selector.options([3]) == [] and selector.options([]) == []


def test_a_choice_is_kept_while_offered_else_each_page_has_its_default():
    two = [0, 1]
    expected = {  # page: (default among several ranks, value with a single rank)
        "Tensors": (rs.MERGED, None), "Modules": (0, None),
        "Metrics": (rs.EVERY_RANK, rs.EVERY_RANK), "Notes": (rs.EVERY_RANK, rs.EVERY_RANK)}
    for name, selector in SELECTORS.items():
        options = selector.options(two)
        assert selector.value(options, 1) == 1, name
        assert selector.value(options, 7) == expected[name][0], name
        assert selector.value([], 1) == expected[name][1], name


def test_one_set_of_rank_values_and_two_names_for_side_by_side_on_the_modules_page():
    assert {rs.EVERY_RANK, rs.MERGED} == {"all", "merged"}
    assert modules.PANELS_SIDE_BY_SIDE == "side" != rs.EVERY_RANK
    assert not hasattr(modules, "SIDE_BY_SIDE")


def test_every_rank_selector_is_registered_once_with_its_box():
    app = create_app(EXAMPLE_RUN, prefetch=False)
    for name, selector in SELECTORS.items():
        ids = [key for key in app.callback_map
               if f"{selector.select_id}.options" in key.strip(".").split("...")]
        assert len(ids) == 1, (name, ids)
        assert f"{selector.box_id}.style" in ids[0], name


@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_each_box_starts_hidden_with_the_pages_ids(name):
    selector = SELECTORS[name]
    box = selector.layout()
    assert (box.id, box.style, box.className) == (selector.box_id, {"display": "none"},
                                                 rs.BOX_CLASS)
    dropdown = box.children[1]
    assert dropdown.id == selector.select_id and dropdown.options == []
    assert dropdown.value == selector.default_without_ranks


def test_the_shown_helpers():
    assert unchanged(["a", [1, 2]], ["a", [1, 2]])
    # keys travel as JSON: a key built with tuples equals the lists the store sends back
    # (the Findings page's [(trial, version), ...] key never matched: re-sent every tick)
    assert unchanged(["a", (1, 2), [("t", 3)]], ["a", [1, 2], [["t", 3]]])
    assert not unchanged(["a", ("t", 3)], ["a", ["t", 4]])
    assert nothing(3) == (no_update, no_update, no_update)
    assert if_changed([1], [1]) is no_update and if_changed([2], [1]) == [2]
