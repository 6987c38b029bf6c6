"""The Metrics page at real size in the browser (issue 27 item 6): a 12-layer GPT-2
(n_embd=32, built from its config) watched with a metric per ``Conv1D``, 48 modules per
figure. The page draws a plot per module type with the layers as colours, the search
narrows the modules drawn, and the one-plot view, the module options and the heatmap
list the modules in natural order (``h.2`` before ``h.10``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from comgra_like.app import create_app
from comgra_like.app.pages import metrics as page
from selenium.webdriver.common.actions.action_builder import ActionBuilder

from tests.browser.helpers import wait_until

pytestmark = pytest.mark.browser

LAYERS = 12
KINDS = ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
CONFIG = {"Conv1D": [["WeightNorm", "linear(2, 0)"], "OutputRMS"]}


@pytest.fixture(scope="module")
def gpt2_group(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import comgra_like

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=LAYERS, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    group = tmp_path_factory.mktemp("gpt2_metrics") / "g"
    gen = torch.Generator().manual_seed(1)
    with comgra_like.watch(model, log_freq=1000, standalone_dir=str(group), trial_id="gpt2",
                           verbose=False, metrics=CONFIG):
        for _ in range(6):
            x = torch.randint(0, 64, (4, 16), generator=gen)
            loss = model(input_ids=x, labels=x).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return group


def figure(dash_duo, metric: str) -> dict:
    """The drawn figure of a metric's card: its traces' name, axis, meta and y labels,
    and its annotations' texts."""
    return dash_duo.driver.execute_script(
        """
        const card = document.querySelector(`.metrics-card[data-metric="${arguments[0]}"]`);
        const gd = card && card.querySelector('.js-plotly-plot');
        if (!gd || !gd.data) return {traces: [], annotations: [], legend: []};
        return {
          traces: gd.data.map((t) => ({name: t.name || '', type: t.type, xaxis: t.xaxis || 'x',
                                       meta: t.meta || null, y: t.type === 'heatmap'
                                       ? Array.from(t.y) : []})),
          annotations: (gd.layout.annotations || []).map((a) => a.text),
          legend: Array.from(gd.querySelectorAll('.legend .legendtext'))
                       .map((e) => e.textContent),
        };
        """, metric)


def lines(fig: dict) -> list[dict]:
    return [t for t in fig["traces"] if t["meta"]]


def layer(name: str) -> int:
    return int(name.split("h.", 1)[1].split(".", 1)[0])


def choose_view(dash_duo, view: str) -> None:
    dash_duo.find_element(f"#{page.VIEW} input[value='{view}']").click()


def search(dash_duo, words: str) -> None:
    box = dash_duo.find_element(f"#{page.SEARCH}")
    box.clear()
    box.send_keys(f"{words}\n")


def test_metrics_page_at_48_modules(dash_duo, gpt2_group):
    dash_duo.start_server(create_app(gpt2_group, refresh_seconds=5, prefetch=False))
    dash_duo.driver.get(dash_duo.server_url + page.PATH)
    dash_duo.wait_for_element(".metrics-card[data-metric='WeightNorm']", timeout=60)

    # auto at 48 modules: a plot per module type, 12 lines each, in layer order
    fig = wait_until(lambda: (f := figure(dash_duo, "WeightNorm")) and len(lines(f)) == 48
                     and f, timeout=60, what="the grouped WeightNorm figure")
    titles = [a for a in fig["annotations"] if "(12)" in a]
    assert [t.split(" ")[0] for t in titles] == [f"h.*.{k}" for k in KINDS]
    by_axis: dict[str, list[str]] = {}
    for t in lines(fig):
        by_axis.setdefault(t["xaxis"], []).append(t["meta"][1])
    assert len(by_axis) == 4
    for modules in by_axis.values():
        assert [layer(m) for m in modules] == list(range(LAYERS))
    # the search narrows the modules: one type, still grouped (12 > 10)
    search(dash_duo, "mlp c_fc")
    fig = wait_until(lambda: (f := figure(dash_duo, "WeightNorm")) and len(lines(f)) == 12
                     and f, what="the search's 12 modules")
    assert {t["meta"][1] for t in lines(fig)} == {
        f"model.transformer.h.{i}.mlp.c_fc" for i in range(LAYERS)}
    assert [a.split(" ")[0] for a in fig["annotations"] if "(12)" in a] == ["h.*.mlp.c_fc"]
    assert "12 modules shown" in dash_duo.find_element(f"#{page.INFO}").text
    # nine modules: one plot (up to 10), a legend in natural order
    search(dash_duo, "c_fc -h.1")
    fig = wait_until(lambda: (f := figure(dash_duo, "WeightNorm")) and len(lines(f)) == 9
                     and len(f["legend"]) == 9 and f, what="the search's nine modules")
    assert fig["legend"] == [f"model.transformer.h.{i}.mlp.c_fc" for i in [0, *range(2, 10)]]

    # every module in one plot: the legend in natural order (h.9 before h.10)
    search(dash_duo, "")
    choose_view(dash_duo, page.LINES)
    fig = wait_until(lambda: (f := figure(dash_duo, "OutputRMS")) and len(lines(f)) == 48
                     and len(f["legend"]) == 48 and f, what="the one-plot view")
    assert [layer(n) for n in fig["legend"]] == sorted(layer(n) for n in fig["legend"])
    assert fig["legend"][:5] == [f"model.transformer.h.0.{k}" for k in KINDS] + [
        "model.transformer.h.1.attn.c_attn"]
    assert fig["legend"][36] == "model.transformer.h.9.attn.c_attn"
    assert fig["legend"][40] == "model.transformer.h.10.attn.c_attn"

    # the heatmap: a row per module, grouped by type, layers in natural order top down
    choose_view(dash_duo, page.HEATMAP)
    fig = wait_until(lambda: (f := figure(dash_duo, "WeightNorm")) and any(
        t["type"] == "heatmap" for t in f["traces"]) and f, what="the heatmap")
    rows = next(t for t in fig["traces"] if t["type"] == "heatmap")["y"][::-1]
    assert rows[:LAYERS] == [f"h.{i}.attn.c_attn" for i in range(LAYERS)]
    assert len(rows) == 48 and rows[LAYERS] == "h.0.attn.c_proj"

    # a click on a cell opens the Modules page at that module and step
    dash_duo.find_element(f"#{page.TARGET} input[value='/modules']").click()
    # the cell's place in the window
    plot = dash_duo.find_element(".metrics-card[data-metric='WeightNorm'] .js-plotly-plot")
    dash_duo.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
    x, y = dash_duo.driver.execute_script(
        """
        const gd = arguments[0];
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.l2p(xa.d2l(arguments[2])),
                box.top + ya._offset + ya.l2p(ya.d2l(arguments[1]))];
        """, plot, "h.3.mlp.c_fc", 2)
    actions = ActionBuilder(dash_duo.driver)
    actions.pointer_action.move_to_location(int(x), int(y))
    actions.pointer_action.click()
    actions.perform()
    wait_until(lambda: dash_duo.driver.current_url.endswith("/modules"),
               what="the Modules page")
    wait_until(lambda: dash_duo.find_elements(
        ".modules-panel[data-module='model.transformer.h.3.mlp.c_fc']"),
        what="the clicked module's panel")
