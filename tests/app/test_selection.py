"""Selector relaxation (comgra_like.app.selection): pure, no Dash, no files."""

from __future__ import annotations

from collections.abc import Mapping

from comgra_like.app import selection as sel
from comgra_like.app.selection import CHAIN
from hypothesis import given, settings
from hypothesis import strategies as st

from comgra_like.vocabulary import ANY_TYPE


class FakeSource:
    """Recordings as a nested description.

    trials: {trial: {step: {"type": toe, "iterations": {it: {node: {role: {rt: [agg keys]}}}}}}}
    """

    def __init__(self, trials: dict):
        self.trials = trials
        self.calls = 0

    def options(self, field: str, up: Mapping):
        self.calls += 1
        if field == "trial":
            return sorted(self.trials)
        steps = self.trials[up["trial"]]
        if field == "type_of_execution":
            return [ANY_TYPE] + sorted({s["type"] for s in steps.values()})
        if field == "training_step":
            toe = up["type_of_execution"]
            return sorted(s for s, d in steps.items() if toe == ANY_TYPE or d["type"] == toe)
        its = steps[up["training_step"]]["iterations"]
        if field == "iteration":
            return sorted(its)
        nodes = its[up["iteration"]]
        if field == "node":
            return list(nodes)
        roles = nodes[up["node"]]
        if field == "role":
            return list(roles)
        rts = roles[up["role"]]
        if field == "recording_type":
            return sorted(rts, key=sel.recording_type_sort_key)
        if field == "aggregation":
            return sorted(rts[up["recording_type"]], key=sel.aggregation_sort_key)
        raise KeyError(field)


ACT = {
    "forward": ["batch_mean", "batch_abs_max", "batch_std", "sample:2", "sample:10"],
    "gradient:loss": ["batch_mean", "batch_abs_max", "batch_std", "sample:2", "sample:10"],
}
PARAM = {"forward": ["none"], "gradient:loss": ["none"], "update": ["none"]}


def _iteration(with_loss: bool) -> dict:
    nodes = {"input": {"x": ACT}, "weight": {"w": PARAM, "b": PARAM}, "hidden": {"h": ACT}}
    if with_loss:
        nodes["loss"] = {"loss": {"forward": ["none"], "gradient:loss": ["none"]}}
    return nodes


def _step(toe: str, n_iterations: int) -> dict:
    return {
        "type": toe,
        "iterations": {i: _iteration(i == n_iterations - 1) for i in range(n_iterations)},
    }


DATA = {
    "trial_a": {
        0: _step("train", 3),
        10: _step("train", 3),
        20: _step("test", 5),
        40: _step("train", 3),
    },
    "trial_b": {0: _step("train", 2), 50: _step("train", 2)},
}


def _is_valid(current: Mapping, source: FakeSource) -> bool:
    for i, field in enumerate(CHAIN):
        upstream = {f: current[f] for f in CHAIN[:i]}
        if current[field] not in source.options(field, upstream):
            return False
    return True


def test_initial_refresh_picks_first_of_everything():
    source = FakeSource(DATA)
    selection = sel.refresh(None, source)
    assert selection["current"] == {
        "trial": "trial_a",
        "type_of_execution": "any",
        "training_step": 0,
        "iteration": 0,
        "node": "input",
        "role": "x",
        "recording_type": "forward",
        "aggregation": "batch_mean",
    }


def test_choice_is_kept_and_downstream_relaxes():
    source = FakeSource(DATA)
    selection = sel.refresh(None, source)
    selection = sel.choose(selection, "aggregation", "sample:10", source)
    selection = sel.choose(selection, "node", "weight", source)
    assert selection["current"]["node"] == "weight"
    assert selection["current"]["role"] == "w"
    assert selection["current"]["aggregation"] == "none"
    # the detour through a parameter does not forget "Sample 10"
    selection = sel.choose(selection, "node", "hidden", source)
    assert selection["current"]["aggregation"] == "sample:10"


def test_recording_type_update_returns_after_detour():
    source = FakeSource(DATA)
    selection = sel.choose(sel.refresh(None, source), "node", "weight", source)
    selection = sel.choose(selection, "recording_type", "update", source)
    selection = sel.choose(selection, "node", "hidden", source)
    assert selection["current"]["recording_type"] == "forward"
    selection = sel.choose(selection, "node", "weight", source)
    assert selection["current"]["recording_type"] == "update"


def test_step_relaxes_to_nearest_when_trial_changes_and_comes_back():
    source = FakeSource(DATA)
    selection = sel.choose(sel.refresh(None, source), "training_step", 40, source)
    selection = sel.choose(selection, "trial", "trial_b", source)
    assert selection["current"]["training_step"] == 50
    selection = sel.choose(selection, "trial", "trial_a", source)
    assert selection["current"]["training_step"] == 40


def test_iteration_relaxes_to_nearest_and_loss_node_follows_the_graph():
    source = FakeSource(DATA)
    selection = sel.choose(sel.refresh(None, source), "training_step", 20, source)  # 5 iterations
    selection = sel.choose(selection, "iteration", 4, source)
    selection = sel.choose(selection, "node", "loss", source)
    selection = sel.choose(selection, "training_step", 10, source)  # 3 iterations
    assert selection["current"]["iteration"] == 2
    # the loss only exists in the last iteration, which iteration 2 is here
    assert selection["current"]["node"] == "loss"
    selection = sel.choose(selection, "iteration", 0, source)
    assert selection["current"]["node"] == "input"  # no loss node in iteration 0


def test_type_of_execution_filters_steps():
    source = FakeSource(DATA)
    selection = sel.choose(sel.refresh(None, source), "training_step", 10, source)
    selection = sel.choose(selection, "type_of_execution", "test", source)
    assert selection["current"]["training_step"] == 20
    assert sel.field_options(selection["current"], "training_step", source) == [20]
    # widening the filter again returns to the step the user chose
    selection = sel.choose(selection, "type_of_execution", "any", source)
    assert selection["current"]["training_step"] == 10
    # ... unless the user worked at the relaxed step in between
    selection = sel.choose(selection, "type_of_execution", "test", source)
    selection = sel.choose(selection, "node", "hidden", source)
    selection = sel.choose(selection, "type_of_execution", "any", source)
    assert selection["current"]["training_step"] == 20


def test_nudge_moves_through_options_and_clamps():
    source = FakeSource(DATA)
    selection = sel.refresh(None, source)
    selection = sel.nudge(selection, "training_step", +1, source)
    assert selection["current"]["training_step"] == 10
    selection = sel.nudge(selection, "training_step", -1, source)
    selection = sel.nudge(selection, "training_step", -1, source)
    assert selection["current"]["training_step"] == 0
    selection = sel.nudge(selection, "aggregation", +1, source)
    assert selection["current"]["aggregation"] == "batch_abs_max"
    selection = sel.nudge(selection, "trial", +1, source)
    assert selection["current"]["trial"] == "trial_b"


def test_kept_choice_moves_upstream_when_needed():
    # iteration 4 exists only at step 20: keeping it moves the step there
    source = FakeSource(DATA)
    selection = sel.refresh(None, source)
    selection["wanted"]["iteration"] = 4
    current = sel.relax(selection["wanted"], source, keep="iteration")
    assert current["iteration"] == 4 and current["training_step"] == 20


def test_impossible_keep_is_ignored():
    source = FakeSource(DATA)
    current = sel.relax({"node": "no_such_node"}, source, keep="node")
    assert _is_valid(current, source)


def test_empty_group_and_trial_without_steps_give_partial_selection():
    assert sel.relax({}, FakeSource({})) == {f: None for f in CHAIN}
    current = sel.relax({}, FakeSource({"t": {}}))
    assert current["trial"] == "t" and current["type_of_execution"] == "any"
    assert current["training_step"] is None and current["node"] is None


def test_samples_sort_naturally_and_labels():
    keys = ["sample:10", "none", "sample:2", "batch_std", "batch_mean", "sample:0"]
    assert sorted(keys, key=sel.aggregation_sort_key) == [
        "batch_mean",
        "batch_std",
        "sample:0",
        "sample:2",
        "sample:10",
        "none",
    ]
    assert sel.option_label("aggregation", "sample:2") == "Sample 2"
    assert sel.option_label("recording_type", "gradient:loss") == "gradient (loss)"
    assert sel.parse_aggregation(sel.aggregation_key("sample", 7)) == ("sample", 7)
    assert sel.parse_aggregation("batch_abs_max") == ("batch_abs_max", -1)


def test_statistic_is_a_plain_preference():
    source = FakeSource(DATA)
    selection = sel.choose(sel.refresh(None, source), "statistic", "abs_max", source)
    assert selection["statistic"] == "abs_max"
    assert sel.refresh(selection, source)["statistic"] == "abs_max"


# --- properties over random recordings --------------------------------------------------

_aggs = st.lists(
    st.sampled_from(
        ["batch_mean", "batch_abs_max", "batch_std", "sample:0", "sample:3", "sample:11", "none"]
    ),
    min_size=1,
    max_size=4,
    unique=True,
)
_roles = st.dictionaries(
    st.sampled_from(["forward", "gradient:a", "update"]), _aggs, min_size=1, max_size=3
)
_nodes = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4"]),
    st.dictionaries(st.sampled_from(["r1", "r2"]), _roles, min_size=1, max_size=2),
    min_size=1,
    max_size=4,
)
_step = st.builds(
    lambda toe, its: {"type": toe, "iterations": its},
    st.sampled_from(["train", "test"]),
    st.dictionaries(st.integers(0, 3), _nodes, min_size=1, max_size=3),
)
_trials = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 100), _step, min_size=1, max_size=4),
    min_size=1,
    max_size=3,
)
_wanted = st.fixed_dictionaries(
    {
        "trial": st.sampled_from(["a", "b", "c", None]),
        "type_of_execution": st.sampled_from(["any", "train", "test"]),
        "training_step": st.one_of(st.none(), st.integers(0, 100)),
        "iteration": st.one_of(st.none(), st.integers(0, 3)),
        "node": st.sampled_from(["n1", "n2", "n3", "n4", None]),
        "role": st.sampled_from(["r1", "r2", None]),
        "recording_type": st.sampled_from(["forward", "gradient:a", "update", None]),
        "aggregation": st.sampled_from(["batch_mean", "sample:3", "sample:5", "none", None]),
    }
)


@settings(max_examples=150, deadline=None)
@given(_trials, _wanted, st.sampled_from([None, *CHAIN]))
def test_relax_always_gives_a_valid_selection_keeping_the_choice_if_possible(trials, wanted, keep):
    source = FakeSource(trials)
    current = sel.relax(wanted, source, keep=keep)
    assert _is_valid(current, source)
    if keep is not None and wanted[keep] == current[keep]:
        return
    if keep is not None:
        # the kept value was impossible under every upstream choice in the wanted trial
        assert not _reachable(trials, keep, wanted[keep], source, wanted.get("trial"))
    # relaxing a valid selection changes nothing
    assert sel.relax(current, source) == current


def _reachable(trials, field, value, source, trial=None) -> bool:
    def walk(depth, up):
        if depth == len(CHAIN):
            return up[field] == value
        f = CHAIN[depth]
        options = source.options(f, up)
        if f == "trial" and field != "trial" and trial is not None:
            options = [trial] if trial in options else []
        return any(walk(depth + 1, {**up, f: v}) for v in options)

    return walk(0, {})


@settings(max_examples=100, deadline=None)
@given(_trials, st.sampled_from(CHAIN), st.sampled_from([-1, 1]))
def test_nudge_stays_valid(trials, field, delta):
    source = FakeSource(trials)
    selection = sel.nudge(sel.refresh(None, source), field, delta, source)
    assert _is_valid(selection["current"], source)
