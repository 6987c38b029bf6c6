"""The first non-finite value: its step, its origin in graph order, the last finite step."""

from __future__ import annotations

from comgra_like.analysis import ERROR, find
from comgra_like.analysis.nonfinite import KIND
from comgra_like.query import open_group


def _first(group):
    found = [f for f in find(group) if f.kind == KIND]
    assert len(found) == 1, found
    return found[0]


def test_log_of_zero_is_found_where_the_zero_reaches_the_log(recorded):
    # positive reaches exactly 0 at step 7: z_log_positive is -inf there, then the loss,
    # the gradients (NaN) and from step 8 on every weight and value.
    group = recorded("log_of_zero", zero_at=7)
    f = _first(group)
    assert f.severity == ERROR
    assert f.steps == (7,)
    assert (f.node, f.role, f.recording_type) == ("z_log_positive", "z_log_positive", "forward")
    assert f.numbers["last_finite_step"] == 6
    assert f.numbers["inf_count"] == 1 and f.numbers["nan_count"] == 0
    assert "step 7" in f.explanation and "'z_log_positive'" in f.explanation
    assert f.numbers["other_non_finite_rows"] > 0  # the loss and gradients came after it

    # Where to look opens on a tensor that really holds the Inf, next to a finite input.
    g = open_group(group)
    w = f.where
    assert (w["trial"], w["training_step"], w["node"]) == ("log_of_zero", 7, "z_log_positive")
    aggregation = w["aggregation"]
    record = g.read_tensor(w["trial"], w["training_step"], w["iteration"], w["node"],
                           w["role"], w["recording_type"], aggregation)
    assert record.stats[w["statistic"]] > 0
    before = g.read_tensor("log_of_zero", 7, 0, "positive", "positive", "forward", aggregation)
    assert before.stats["inf_count"] == 0 and before.stats["nan_count"] == 0
    assert before.stats["abs_max"] == 0


def test_sparse_recording_names_the_parameter_and_the_finite_step_before(recorded):
    # Only even steps are recorded: step 7 (the -inf) is not; step 8 starts with weights
    # that step 7's update made NaN, so the origin is a parameter, nothing before it.
    f = _first(recorded("log_of_zero", zero_at=7, record_every=2))
    assert f.steps == (8,)
    assert f.numbers["last_finite_step"] == 6
    assert f.node.startswith("net.") and f.where["iteration"] == -1
    assert "update of an earlier, unrecorded step" in f.explanation


def test_no_finding_without_the_fault(recorded):
    assert [f for f in find(recorded("log_of_zero", zero_at=None)) if f.kind == KIND] == []


def test_a_nan_in_the_data_is_traced_to_the_input(recorded):
    f = _first(recorded("nan_in_the_data", bad_at=3))
    assert (f.steps, f.node, f.recording_type) == ((3,), "input", "forward")
    assert f.numbers["nan_count"] == 1 and f.numbers["last_finite_step"] == 2
    assert "the data itself is not finite" in f.explanation


def test_a_gradient_that_is_not_finite_is_traced_backwards(recorded):
    # sqrt(0) = 0 is finite; its derivative is not. Step 7's values are all finite, the
    # first non-finite number is the gradient of `positive`, where sqrt's derivative
    # meets the (finite) gradient coming from the loss.
    f = _first(recorded("log_of_zero", zero_at=7, op="sqrt"))
    assert f.steps == (7,) and f.numbers["last_finite_step"] == 6
    assert (f.node, f.recording_type) == ("positive", "gradient:gradients")
    assert f.numbers["inf_count"] == 1
    assert "the gradients of what uses it" in f.explanation
