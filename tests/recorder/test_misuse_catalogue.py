"""The misuse catalogue: what a careless or hostile user does to the recorder, one row each.

Every row runs against a real recorder (and its writer process) that has already recorded
one good step. A misuse either raises a ``ComgraError`` subclass whose message names the
culprit, or is a documented acceptance (README, "What the recorder refuses"). Either way
the step recorded before stays readable and the recorder goes on: the harness then
records another good step through the public API only and reads both back.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from comgra_like.errors import (
    CallOrderError,
    ComgraError,
    ConfigurationError,
    GraphError,
    RecordingDecisionError,
    RegistrationError,
    StorageError,
    TrainingStepError,
)
from comgra_like.objects import (
    DecisionMakerForRecordingsFrequencyPerType,
    DecisionMakerForRecordingsHardcoded,
)
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

B = 4
BEFORE, AFTER = 0, 1000  # the good steps around every misuse


class Ctx:
    """What a misuse works with: a recorder that has recorded step 0, and its model."""

    def __init__(self, root: Path, trial_id: str = "t", track: bool = True):
        torch.manual_seed(0)
        self.root = root
        self.rec = ComgraRecorder(root, "g", trial_id, DecisionMakerForRecordingsHardcoded(
            range(2000)))
        self.model = torch.nn.Linear(3, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self._step = 10
        if track:
            self.rec.track_module("m", self.model)
            self.good_step(BEFORE)

    def next_step(self) -> int:
        self._step += 1
        return self._step

    def good_step(self, step: int) -> None:
        rec = self.rec
        rec.start_batch(step, B)
        rec.start_iteration()
        x = torch.randn(B, 3)
        rec.register_tensor("x", x, is_input=True)
        y = self.model(x)
        rec.register_tensor("y", y)
        loss = y.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        self.opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("main")
        self.opt.step()
        rec.record_kpi_in_graph("loss", "mse", loss)
        rec.finish_iteration()
        rec.finish_batch()

    def open_batch(self, **kwargs) -> int:
        step = self.next_step()
        self.rec.start_batch(step, B, **kwargs)
        return step

    def open_iteration(self, **kwargs) -> torch.Tensor:
        """A recorded step inside its first iteration, with input ``x`` registered."""
        self.open_batch(**kwargs)
        self.rec.start_iteration()
        x = torch.randn(B, 3)
        self.rec.register_tensor("x", x, is_input=True)
        return x

    def close_open_step(self) -> None:
        """End whatever step a misuse left open, through the public API only."""
        try:
            self.rec.finish_iteration()
        except CallOrderError:
            pass  # no iteration open
        try:
            self.rec.finish_batch()
        except CallOrderError:
            pass  # no step open
        except RecordingDecisionError:
            pass  # a dynamic step that was never decided: it ends unrecorded


@dataclass
class Misuse:
    name: str
    act: Callable[[Ctx], object]
    error: type[ComgraError] | None  # None: accepted (documented)
    match: str = ""  # regex the message (or, if accepted, a warning) must contain
    finalizes: bool = False  # the act ends the trial: no good step after it
    track: bool = True


def _fresh(ctx: Ctx, **kwargs) -> ComgraRecorder:
    """Another recorder; by default in the misused trial's own group (an id that escapes
    its folder would delete that trial)."""
    kwargs.setdefault("comgra_root_path", ctx.root)
    kwargs.setdefault("group", "g")
    kwargs.setdefault("trial_id", "other")
    kwargs.setdefault("decision_maker_for_recordings", DecisionMakerForRecordingsHardcoded([0]))
    return ComgraRecorder(**kwargs)


def _other(ctx: Ctx) -> ComgraRecorder:
    """A valid recorder in a folder of its own."""
    return _fresh(ctx, comgra_root_path=ctx.root / "elsewhere")


def _file_as_root(ctx: Ctx):
    path = ctx.root / "a_file"
    path.write_text("not a folder")
    return _fresh(ctx, comgra_root_path=path)


def _below_a_file(ctx: Ctx):
    path = ctx.root / "a_file"
    path.write_text("not a folder")
    return _fresh(ctx, comgra_root_path=path / "deeper")


def _symlinked_trial(ctx: Ctx):
    outside = ctx.root / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    trials = ctx.root / "elsewhere" / "g" / "trials"
    trials.mkdir(parents=True)
    (trials / "linked").symlink_to(outside, target_is_directory=True)
    try:
        return _fresh(ctx, comgra_root_path=ctx.root / "elsewhere", trial_id="linked")
    finally:
        assert (outside / "keep.txt").read_text() == "precious"


def _in_iteration(fn: Callable[[Ctx, torch.Tensor], object]) -> Callable[[Ctx], object]:
    def act(ctx: Ctx):
        x = ctx.open_iteration()
        return fn(ctx, x)
    return act


def _in_dynamic_batch(fn: Callable[[Ctx], object]) -> Callable[[Ctx], object]:
    def act(ctx: Ctx):
        ctx.open_batch(type_of_execution=None)
        return fn(ctx)
    return act


def _stale_gradients(ctx: Ctx):
    x = ctx.open_iteration()
    y = ctx.model(x)
    ctx.rec.register_tensor("y", y)
    # The previous step's backward left .grad on the parameters; no backward here.
    ctx.rec.record_current_gradients("main")


def _second_group_without_backward(ctx: Ctx):
    x = ctx.open_iteration()
    loss = ctx.model(x).pow(2).mean()
    ctx.rec.register_tensor("loss", loss, is_loss=True)
    loss.backward()
    ctx.rec.record_current_gradients("first")
    ctx.rec.record_current_gradients("second")


def _cycle(ctx: Ctx, x):
    y = x * 2
    ctx.rec.register_tensor("y", y)
    ctx.rec.add_tensor_connection("y", x)
    ctx.rec.finish_iteration()


def _undecided_many_times(ctx: Ctx):
    # More often than there are shared-memory slots: a slot kept per error would block.
    for _ in range(11):
        ctx.open_batch(type_of_execution=None)
        with pytest.raises(RecordingDecisionError, match="decide_recording_of_batch"):
            ctx.rec.finish_batch()
    ctx.open_batch(type_of_execution=None)
    ctx.rec.finish_batch()


def _decide_twice(ctx: Ctx):
    ctx.rec.decide_recording_of_batch("dyn")
    ctx.rec.decide_recording_of_batch("dyn")


def _finalize_then(fn: Callable[[Ctx], object]) -> Callable[[Ctx], object]:
    def act(ctx: Ctx):
        ctx.rec.finalize()
        return fn(ctx)
    return act


def _finalize_inside_step(ctx: Ctx):
    ctx.open_iteration()
    ctx.rec.finalize()


def _inference_mode_tensor(ctx: Ctx):
    # A validation loop: the outputs are made under inference_mode and registered after it.
    ctx.open_batch(type_of_execution="validation")
    ctx.rec.start_iteration()
    with torch.inference_mode():
        x = torch.randn(B, 3)
        y = ctx.model(x)
    ctx.rec.register_tensor("x", x, is_input=True)
    ctx.rec.register_tensor("y", y)
    ctx.rec.finish_iteration()
    ctx.rec.finish_batch()
    group = open_group(ctx.root / "g")
    ctx.rec.finalize()  # (the harness's finalize() after this is a no-op)
    group.refresh()
    record = group.read_tensor("t", 11, 0, "y", "y", "forward", "batch_mean")
    assert record.values == pytest.approx(y.mean(dim=0).numpy())


def _registered_after_use(ctx: Ctx):
    ctx.open_batch()
    ctx.rec.start_iteration()
    x = torch.randn(B, 3)
    y = ctx.model(x)  # x is used before it is registered: no edge x -> y can exist
    ctx.rec.register_tensor("x_late", x, is_input=True)
    ctx.rec.register_tensor("y", y)
    ctx.rec.finish_iteration()
    ctx.rec.finish_batch()


def _no_gradients(ctx: Ctx):
    with torch.no_grad():
        ctx.open_batch(type_of_execution="evaluation")
        ctx.rec.start_iteration()
        ctx.rec.register_tensor("y", ctx.model(torch.randn(B, 3)))
        ctx.rec.finish_iteration()
        # parameters' gradients are from the last step; none of the registered ones has one
    for p in ctx.model.parameters():
        p.grad = None
    ctx.rec.record_current_gradients("none_here")
    ctx.rec.finish_batch()


def _same_tensor_twice(ctx: Ctx, x):
    ctx.rec.register_tensor("x_again", x, node_name="copy")


CATALOGUE = [
    # --- the constructor: refused before anything on disk changes ---------------------
    Misuse("trial_id_dotdot", lambda c: _fresh(c, trial_id=".."), ConfigurationError, r"'\.\.'"),
    Misuse("trial_id_dot", lambda c: _fresh(c, trial_id="."), ConfigurationError, r"'\.'"),
    Misuse("trial_id_newline", lambda c: _fresh(c, trial_id="a\n"), ConfigurationError,
           r"'a\\n'"),
    Misuse("trial_id_too_long", lambda c: _fresh(c, trial_id="x" * 300), ConfigurationError,
           "xxxx.*128"),
    Misuse("trial_id_slash", lambda c: _fresh(c, trial_id="a/b"), ConfigurationError, "'a/b'"),
    Misuse("trial_id_empty", lambda c: _fresh(c, trial_id=""), ConfigurationError, "''"),
    Misuse("trial_id_hidden", lambda c: _fresh(c, trial_id=".hidden"), ConfigurationError,
           "'.hidden'"),
    Misuse("group_dotdot", lambda c: _fresh(c, group=".."), ConfigurationError, r"group '\.\.'"),
    Misuse("group_slash", lambda c: _fresh(c, group="a/b"), ConfigurationError, "group 'a/b'"),
    Misuse("group_empty", lambda c: _fresh(c, group=""), ConfigurationError, "group ''"),
    Misuse("decision_maker_int", lambda c: _fresh(c, decision_maker_for_recordings=10),
           ConfigurationError, "decision maker.*10"),
    Misuse("decision_maker_none", lambda c: _fresh(c, decision_maker_for_recordings=None),
           ConfigurationError, "decision maker.*None"),
    Misuse("max_batch_negative", lambda c: _fresh(c, max_num_batch_size_to_record=-1),
           ConfigurationError, "max_num_batch_size_to_record.*-1"),
    Misuse("max_batch_string", lambda c: _fresh(c, max_num_batch_size_to_record="5"),
           ConfigurationError, "max_num_batch_size_to_record.*'5'"),
    Misuse("root_is_a_file", _file_as_root, StorageError, "cannot create the folder .*a_file"),
    Misuse("root_below_a_file", _below_a_file, StorageError, "cannot create the folder .*a_file"),
    Misuse("trial_folder_is_a_symlink", _symlinked_trial, StorageError, "linked.*symbolic link"),
    Misuse("frequency_zero", lambda c: DecisionMakerForRecordingsFrequencyPerType(0),
           ConfigurationError, "min_training_steps_difference.*0"),
    Misuse("frequency_string", lambda c: DecisionMakerForRecordingsFrequencyPerType("10"),
           ConfigurationError, "min_training_steps_difference.*'10'"),
    Misuse("backoff_string", lambda c: DecisionMakerForRecordingsFrequencyPerType(10, "x"),
           ConfigurationError, "exponential_backoff_factor.*'x'"),
    Misuse("backoff_below_one", lambda c: DecisionMakerForRecordingsFrequencyPerType(10, 0.5),
           ConfigurationError, "exponential_backoff_factor.*0.5"),
    Misuse("hardcoded_strings", lambda c: DecisionMakerForRecordingsHardcoded(["a"]),
           ConfigurationError, "fixed_training_steps.*'a'"),
    Misuse("hardcoded_not_iterable", lambda c: DecisionMakerForRecordingsHardcoded(5),
           ConfigurationError, "fixed_training_steps.*5"),
    # --- modules ---------------------------------------------------------------------
    Misuse("track_non_module", lambda c: _other(c).track_module("n", 5), ConfigurationError,
           "track_module.'n'.*nn.Module"),
    Misuse("track_empty_name", lambda c: _other(c).track_module("", c.model),
           ConfigurationError, "module_name ''"),
    Misuse("track_dotted_name", lambda c: _other(c).track_module("a.b", c.model),
           ConfigurationError, "module_name 'a.b'"),
    Misuse("track_twice", lambda c: c.rec.track_module("m", torch.nn.Linear(2, 2)),
           CallOrderError, "track_module.'m'.*before the first start_batch"),
    Misuse("name_of_untracked", lambda c: c.rec.get_name_of_module(torch.nn.ReLU()),
           RegistrationError, "ReLU is not tracked"),
    Misuse("no_module_tracked", lambda c: c.rec.start_batch(c.next_step(), B), CallOrderError,
           "no module is tracked", track=False),
    # --- start_batch -------------------------------------------------------------------
    Misuse("step_float", lambda c: c.rec.start_batch(1.5, B), ConfigurationError, r"1\.5"),
    Misuse("step_none", lambda c: c.rec.start_batch(None, B), ConfigurationError, "None"),
    Misuse("step_bool", lambda c: c.rec.start_batch(True, B), ConfigurationError, "True"),
    Misuse("step_string", lambda c: c.rec.start_batch("12", B), ConfigurationError, "'12'"),
    Misuse("step_too_large", lambda c: c.rec.start_batch(2**70, B), ConfigurationError,
           str(2**70)),
    Misuse("step_not_increasing", lambda c: c.rec.start_batch(BEFORE, B), TrainingStepError,
           "got 0 after 0"),
    Misuse("batch_size_zero", lambda c: c.rec.start_batch(c.next_step(), 0), ConfigurationError,
           "current_batch_size=0"),
    Misuse("batch_size_negative", lambda c: c.rec.start_batch(c.next_step(), -3),
           ConfigurationError, "current_batch_size=-3"),
    Misuse("batch_size_float", lambda c: c.rec.start_batch(c.next_step(), 2.0),
           ConfigurationError, r"current_batch_size=2\.0"),
    Misuse("toe_space", lambda c: c.rec.start_batch(c.next_step(), B, "a b"), ConfigurationError,
           "'a b'"),
    Misuse("toe_newline", lambda c: c.rec.start_batch(c.next_step(), B, "main\n"),
           ConfigurationError, r"'main\\n'"),
    Misuse("toe_reserved", lambda c: c.rec.start_batch(c.next_step(), B, "any"),
           ConfigurationError, "'any' is reserved"),
    Misuse("toe_dunder", lambda c: c.rec.start_batch(c.next_step(), B, "__x"),
           ConfigurationError, "'__x' is reserved"),
    Misuse("toe_int", lambda c: c.rec.start_batch(c.next_step(), B, 5), ConfigurationError,
           "type_of_execution 5"),
    Misuse("start_twice", lambda c: (c.open_batch(), c.rec.start_batch(c.next_step(), B)),
           CallOrderError, "before finish_batch.. of step 11"),
    # --- register_tensor ----------------------------------------------------------------
    Misuse("register_non_tensor", _in_iteration(lambda c, x: c.rec.register_tensor("n", [1])),
           RegistrationError, "'n'.*list"),
    Misuse("register_empty_name", _in_iteration(
        lambda c, x: c.rec.register_tensor("", x * 1)), RegistrationError, "tensor_name must be a non-empty string, got ''"),
    Misuse("register_int_name", _in_iteration(
        lambda c, x: c.rec.register_tensor(5, x * 1)), RegistrationError, "tensor_name must be a non-empty string, got 5"),
    Misuse("register_two_roles", _in_iteration(
        lambda c, x: c.rec.register_tensor("t", x * 1, is_input=True, is_target=True)),
           RegistrationError, "'t': at most one of"),
    Misuse("register_outside_batch", lambda c: c.rec.register_tensor("o", torch.zeros(B, 3)),
           CallOrderError, "register_tensor.'o'.*start_batch"),
    Misuse("register_outside_iteration", lambda c: (
        c.open_batch(), c.rec.register_tensor("o", torch.zeros(B, 3))), CallOrderError,
           "register_tensor.'o'.*start_iteration"),
    Misuse("initial_value_in_iteration", _in_iteration(
        lambda c, x: c.rec.register_tensor("i", x * 1, is_initial_value=True)), CallOrderError,
           "'i': is_initial_value"),
    Misuse("recording_type_unknown", _in_iteration(
        lambda c, x: c.rec.register_tensor("r", x * 1, recording_type="all")),
           RegistrationError, "'r': recording_type.*'all'"),
    Misuse("integer_tensor", _in_iteration(
        lambda c, x: c.rec.register_tensor("ints", torch.zeros(B, 3, dtype=torch.long))),
           RegistrationError, "'ints' has dtype torch.int64"),
    Misuse("loss_not_scalar", _in_iteration(
        lambda c, x: c.rec.register_tensor("l", x * 1, is_loss=True)), RegistrationError,
           "loss 'l' must be a scalar"),
    Misuse("batch_dim_out_of_range", _in_iteration(
        lambda c, x: c.rec.register_tensor("d", x * 1, index_of_batch_dimension=2)),
           RegistrationError, "'d' has shape .4, 3. and no dimension 2"),
    Misuse("batch_dim_string", _in_iteration(
        lambda c, x: c.rec.register_tensor("d", x * 1, index_of_batch_dimension="0")),
           RegistrationError, "'d' has shape"),
    Misuse("batch_size_mismatch", _in_iteration(
        lambda c, x: c.rec.register_tensor("w", torch.zeros(B + 1, 3))), RegistrationError,
           "'w' has size 5 in its batch dimension"),
    Misuse("duplicate_name", _in_iteration(lambda c, x: c.rec.register_tensor("x", x * 1)),
           RegistrationError, "named 'x' is registered already"),
    Misuse("duplicate_role", _in_iteration(
        lambda c, x: c.rec.register_tensor("z", x * 1, node_name="x", role_within_node="x")),
           RegistrationError, "node 'x' already has a tensor with role 'x'.*'z'"),
    Misuse("per_sample_without_batch_dim", _in_iteration(
        lambda c, x: c.rec.register_tensor("s", x * 1, index_of_batch_dimension=None,
                                           record_per_batch_index=True)),
           RegistrationError, "'s' has no batch dimension"),
    Misuse("meta_tensor", _in_iteration(
        lambda c, x: c.rec.register_tensor("meta", torch.empty(B, 3, device="meta"))),
           RegistrationError, "'meta' is on the meta device"),
    # --- connections ------------------------------------------------------------------
    Misuse("connect_unknown_name", _in_iteration(
        lambda c, x: c.rec.add_tensor_connection("nope", x * 1)), RegistrationError,
           "no tensor named 'nope'"),
    Misuse("connect_sink_not_tensor", _in_iteration(
        lambda c, x: c.rec.add_tensor_connection("x", 5)), RegistrationError, "sink must be"),
    Misuse("connect_source_not_tensor", _in_iteration(
        lambda c, x: c.rec.add_tensor_connection(5, x * 1)), RegistrationError,
           "expected a tensor, a tensor name or a TensorReference, got int"),
    Misuse("detach_non_tensor", _in_iteration(
        lambda c, x: c.rec.detach_while_keeping_connection([1, 2])), RegistrationError,
           "detach_while_keeping_connection.*list"),
    Misuse("connection_cycle", _in_iteration(_cycle), GraphError, "cycle .*x.*y"),
    # --- gradients ----------------------------------------------------------------------
    Misuse("gradients_before_backward", _stale_gradients, CallOrderError,
           "record_current_gradients.'main'.*after loss.backward"),
    Misuse("gradient_group_twice", _in_iteration(lambda c, x: (
        c.model(x).sum().backward(), c.rec.record_current_gradients("g"),
        c.rec.record_current_gradients("g"))), RegistrationError,
           "loss group 'g' were recorded already"),
    Misuse("second_group_without_backward", _second_group_without_backward, CallOrderError,
           "record_current_gradients.'second'.*old gradients"),
    Misuse("gradient_group_colon", _in_iteration(
        lambda c, x: c.rec.record_current_gradients("a:b")), ConfigurationError,
           "name_of_loss_group 'a:b'"),
    Misuse("gradient_group_empty", _in_iteration(
        lambda c, x: c.rec.record_current_gradients("")), ConfigurationError,
           "name_of_loss_group ''"),
    Misuse("gradients_before_decision", _in_dynamic_batch(
        lambda c: c.rec.record_current_gradients("main")), RecordingDecisionError,
           "before decide_recording_of_batch"),
    # --- order of calls ---------------------------------------------------------------
    Misuse("start_iteration_twice", lambda c: (
        c.open_batch(), c.rec.start_iteration(), c.rec.start_iteration()), CallOrderError,
           "start_iteration.. must follow"),
    Misuse("finish_iteration_unopened", lambda c: (c.open_batch(), c.rec.finish_iteration()),
           CallOrderError, "finish_iteration.. without a matching start_iteration"),
    Misuse("finish_batch_in_iteration", _in_iteration(lambda c, x: c.rec.finish_batch()),
           CallOrderError, "finish_batch.. called before finish_iteration"),
    Misuse("finish_batch_unopened", lambda c: c.rec.finish_batch(), CallOrderError,
           "finish_batch.. without start_batch"),
    Misuse("finish_undecided_batch", _undecided_many_times, RecordingDecisionError,
           "decide_recording_of_batch"),
    Misuse("decide_twice", _in_dynamic_batch(_decide_twice), RecordingDecisionError,
           "called twice in step 11"),
    Misuse("decide_in_static_batch", lambda c: (
        c.open_batch(), c.rec.decide_recording_of_batch("x")), RecordingDecisionError,
           "only for batches started with type_of_execution=None"),
    Misuse("decide_outside_batch", lambda c: c.rec.decide_recording_of_batch("x"),
           CallOrderError, "decide_recording_of_batch.. must be called inside a batch"),
    Misuse("decide_bad_type", _in_dynamic_batch(
        lambda c: c.rec.decide_recording_of_batch("a b")), ConfigurationError, "'a b'"),
    Misuse("decide_wrong_category_count", _in_dynamic_batch(
        lambda c: c.rec.decide_recording_of_batch("x", [0, 1])), RecordingDecisionError,
           "category_per_sample has 2 entries but the batch has 4"),
    Misuse("decide_category_string", _in_dynamic_batch(
        lambda c: c.rec.decide_recording_of_batch("x", "abcd")), RecordingDecisionError,
           "category_per_sample.*'abcd'"),
    # --- KPIs ---------------------------------------------------------------------------
    Misuse("kpi_value_string", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", "high", 1, record_even_if_recording_is_inactive=True),
           ConfigurationError, "'g', 'k'.*'high' is not a number"),
    Misuse("kpi_value_vector", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", torch.ones(3), 1, record_even_if_recording_is_inactive=True),
           ConfigurationError, r"'g', 'k'.*shape \(3,\)"),
    Misuse("kpi_value_huge", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", 10**400, 1, record_even_if_recording_is_inactive=True),
           ConfigurationError, "'g', 'k'.*is not a number"),
    Misuse("kpi_timepoint_string", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", 1.0, "later", record_even_if_recording_is_inactive=True),
           ConfigurationError, "timepoint.*'later'"),
    Misuse("kpi_timepoint_float", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", 1.0, 2.5, record_even_if_recording_is_inactive=True),
           ConfigurationError, r"timepoint.*2\.5"),
    Misuse("kpi_before_any_step", lambda c: c.rec.record_kpi_in_graph(
        "g", "k", 1.0, record_even_if_recording_is_inactive=True), CallOrderError,
           "without a timepoint needs a training step", track=False),
    Misuse("kpi_after_finalize", _finalize_then(lambda c: c.rec.record_kpi_in_graph(
        "g", "k", 1.0, 5, record_even_if_recording_is_inactive=True)), CallOrderError,
           "'g', 'k'.*after finalize", finalizes=True),
    # --- the end of a trial ---------------------------------------------------------------
    Misuse("note_after_finalize", _finalize_then(lambda c: c.rec.add_note("too late")),
           CallOrderError, "add_note.'too late'.*after finalize", finalizes=True),
    Misuse("start_after_finalize", _finalize_then(lambda c: c.rec.start_batch(c.next_step(), B)),
           CallOrderError, "after finalize", finalizes=True),
    Misuse("finalize_inside_step", _finalize_inside_step, None,
           "finalize.. was called inside step 11", finalizes=True),
    Misuse("finalize_twice", _finalize_then(lambda c: c.rec.finalize()), None, "",
           finalizes=True),
    # --- accepted and recorded (documented) --------------------------------------------
    Misuse("inference_mode_tensor", _inference_mode_tensor, None, "", finalizes=True),
    Misuse("registered_after_use", _registered_after_use, None,
           "nothing registered depends on 'x_late'"),
    Misuse("gradients_when_there_are_none", _no_gradients, None,
           "record_current_gradients.'none_here'.*found no gradient"),
    Misuse("same_tensor_two_names", _in_iteration(_same_tensor_twice), None, ""),
]


def test_the_catalogue_is_large_and_unique():
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    assert len(CATALOGUE) >= 60


@pytest.mark.parametrize("misuse", CATALOGUE, ids=lambda m: m.name)
def test_misuse(misuse: Misuse, tmp_path, caplog):
    ctx = Ctx(tmp_path, track=misuse.track)
    caplog.set_level(logging.WARNING, logger="comgra_like")
    if misuse.error is None:
        misuse.act(ctx)
        if misuse.match:
            assert any(re.search(misuse.match, r.getMessage()) for r in caplog.records), (
                [r.getMessage() for r in caplog.records])
    else:
        with pytest.raises(misuse.error) as info:
            misuse.act(ctx)
        assert re.search(misuse.match, str(info.value)), str(info.value)
        # Not a Python error that happens to fit: our type, raised on purpose.
        assert isinstance(info.value, ComgraError)
    # The recorder goes on (unless the misuse ended the trial) ...
    steps = [BEFORE] if misuse.track else []
    if not misuse.finalizes:
        ctx.close_open_step()
        if not misuse.track:
            ctx.rec.track_module("m", ctx.model)
        ctx.good_step(AFTER)
        steps.append(AFTER)
    ctx.rec.finalize()
    # ... and what it recorded, before and after, reads back.
    group = open_group(tmp_path / "g")
    group.refresh()
    recorded = set(group.list_steps("t")["training_step"])
    assert set(steps) <= recorded
    for step in steps:
        record = group.read_tensor("t", step, 0, "y", "y", "forward", "batch_mean")
        assert record.values.shape == (2,) and all(map(math.isfinite, record.values))
    # Nothing else appeared in, or vanished from, the group.
    assert [t.trial_id for t in group.list_trials()] == ["t"]
