"""Rows on demand in the browser (issue 18): a flow above the bound is stored without
its matrix; a click on a unit of its target says so, and says that no process serves the
trial before one runs; "compute this unit's row" writes a request, a real serving process
(tests/flow/row_child.py) answers it, and the row appears on the page without reload:
the outline reaches the earlier node and the Sankey draws the row's links."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from comgra_like.app.pages import flow as page

from comgra_like.format import flow_requests as fr
from comgra_like.query import open_group
from tests.browser.helpers import wait_until
from tests.browser.test_flow import click_button, click_cell, links, open_flow_page, trace_names

pytestmark = pytest.mark.browser

CHILD = Path(__file__).parents[1] / "flow" / "row_child.py"


def test_a_clicked_units_row_is_computed_on_demand(dash_duo, tmp_path):
    pytest.importorskip("torch")
    group_dir = tmp_path / "g"
    # no probes, one row request: the process ends after answering it
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), "g", "rows", "0", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (group_dir / "trials" / "rows" / "trial.json").exists()
                   and open_group(group_dir).read_flows("rows"), 120, "the base flows")
        wait_until(lambda: fr.serving(group_dir, "rows").alive, 60, "the heartbeat")
        open_flow_page(dash_duo, group_dir)
        dash_duo.wait_for_contains_text(
            f"#{page.SUMMARY}", "input → conv1: no matrix stored (too_large)", timeout=10)
        wait_until(lambda: trace_names(dash_duo, page.HEATMAPS)[:3] == [
            "input", "conv1", "conv2"], what="the heatmaps")
        drawn = links(dash_duo)  # conv1 -> conv2 only

        # conv1's centre unit: its row of input -> conv1 is not stored
        click_cell(dash_duo, page.HEATMAPS, 1, 4)
        dash_duo.wait_for_contains_text(f"#{page.UNIT_INFO}", "not known for input",
                                        timeout=10)
        dash_duo.wait_for_contains_text(
            f"#{page.ROW_TEXT}", "input → conv1 has no full matrix stored (648 entries",
            timeout=10)
        assert "No process is serving" not in dash_duo.find_element(f"#{page.ROW_TEXT}").text
        click_button(dash_duo, page.ROW_BUTTON)
        # answered by the serving process; shown within a refresh, no reload
        dash_duo.wait_for_contains_text(f"#{page.ROW_STATUS}", "Computed the row of conv1 "
                                        "unit 4", timeout=60)
        dash_duo.wait_for_contains_text(
            f"#{page.UNIT_INFO}", "conv1 unit 4 exchanges gradient with input: 9 units",
            timeout=10)
        assert "highlight input" in trace_names(dash_duo, page.HEATMAPS)
        dash_duo.wait_for_contains_text(
            f"#{page.SUMMARY}", "input → conv1: partial flow, only the row of 1 unit of conv1 was computed",
            timeout=10)
        wait_until(lambda: (links(dash_duo) or 0) > drawn, what="the row's links drawn")
        assert dash_duo.find_element(f"#{page.ROW_BOX}").value_of_css_property(
            "display") == "none"
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (request,) = fr.list_requests(group_dir, "rows")
    assert request.units == (4,) and request.status == "done"
    row = open_group(group_dir).read_flow("rows", request.record_ids[0]).flow
    assert np.count_nonzero(row) == 9  # the 3x3 patch, as the page outlined

    # the serving process has ended: a click on another unit says nobody will answer
    dash_duo.wait_for_contains_text(f"#{page.HISTORY}", "recorded run", timeout=10)
    click_cell(dash_duo, page.HEATMAPS, 1, 0)
    dash_duo.wait_for_contains_text(f"#{page.ROW_TEXT}", "No process is serving probes for "
                                    "rows: run comgra_like.probe.serve(fn", timeout=15)
    click_button(dash_duo, page.ROW_BUTTON)
    dash_duo.wait_for_contains_text(f"#{page.ROW_STATUS}", "It answers the request when it "
                                    "starts", timeout=15)
    assert len(fr.pending_requests(group_dir, "rows")) == 1
