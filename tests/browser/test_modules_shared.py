"""Tied parameters on the Modules page in the browser (issue 27 item 2): a 2-layer GPT-2
(built from its config) watched for a few steps; ``lm_head`` holds ``wte``'s weight,
which is recorded once, under ``wte``. A click on ``lm_head`` shows that weight's
histograms under it, the panel's title says it is shared and where it is recorded, and
the module's hover says so too."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app import create_app
from comgra_like.app.pages import modules

from tests.browser.helpers import wait_until
from tests.browser.test_gui import click_node
from tests.browser.test_modules import MODULE_GRAPH, shown_keys

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import comgra_like

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    group = tmp_path_factory.mktemp("modules_shared") / "g"
    gen = torch.Generator().manual_seed(1)
    with comgra_like.watch(model, log_freq=1, standalone_dir=str(group), trial_id="gpt2",
                           verbose=False):
        for _ in range(3):
            x = torch.randint(0, 64, (2, 8), generator=gen)
            loss = model(input_ids=x, labels=x).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return group


def panel_state(dash_duo) -> dict:
    """The first panel's parameter choice (enabled or not) and its figure's title."""
    return dash_duo.driver.execute_script(
        """
        const panel = document.querySelector('.modules-panel');
        if (!panel) return {};
        const params = panel.querySelector("input[value='params']");
        const gd = panel.querySelector('.js-plotly-plot');
        const title = gd && gd.layout && gd.layout.title ? gd.layout.title.text : '';
        return {module: panel.getAttribute('data-module'), title: title,
                params: params ? !params.disabled : null};
        """)


def test_lm_head_shows_the_tied_weight(dash_duo, gpt2):
    dash_duo.start_server(create_app(gpt2, refresh_seconds=5, prefetch=False))
    dash_duo.driver.get(dash_duo.server_url + modules.PATH)
    head = wait_until(lambda: [k for k in shown_keys(dash_duo) if k.endswith("lm_head")],
                      timeout=60, what="the top level with lm_head")[0]
    hover = dash_duo.driver.execute_script(
        """const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
           const t = gd.data.find((d) => d.name === 'modules');
           return t.hovertext[t.customdata.findIndex((c) => c[0] === arguments[1])];""",
        MODULE_GRAPH, head)
    assert "weight shared with model.transformer.wte.weight" in hover
    click_node(dash_duo, head, graph=MODULE_GRAPH)
    wait_until(lambda: panel_state(dash_duo).get("module") == head, what="lm_head's panel")
    # parameters are offered (they were greyed out: recorded under wte only)
    wait_until(lambda: panel_state(dash_duo).get("params"), what="params enabled")
    dash_duo.find_element(".modules-panel input[value='params']").click()
    state = wait_until(lambda: (s := panel_state(dash_duo)) and "parameters" in s["title"]
                       and s, what="the parameter histograms")
    assert "weight" in state["title"]
    assert "shared with model.transformer.wte.weight" in state["title"]
    assert "recorded as model.transformer.wte.weight" in state["title"]
    dash_duo.wait_for_element(".modules-panel .heatmaplayer image, .modules-panel .hm image",
                              timeout=15)
