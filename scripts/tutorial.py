"""The comgra-like tutorial: a small recurrent network with a subtle bug.

Run it with ``comgra-test-run`` (or ``python -m comgra_like.scripts.tutorial``).

The task: every sample is a sequence of N steps; each step holds 5 numbers drawn
uniformly from [-1, 1]. The 5 positions are 5 independent channels. For every channel
the network must say whether the channel's sum over the whole sequence is positive
(target 1) or not (target 0). Training uses sequence lengths 1 to 10; lengths 15 and 20
are only used for testing (forward and backward pass, but no optimizer step), so they
show how well the network generalizes to longer sequences.

The network reads one step per iteration. Three small MLPs (Linear, LeakyReLU(0.01),
Linear) share the work:

* ``subnet_pre`` turns the current input and the memory into a hidden vector,
* ``subnet_out`` turns the hidden vector into 5 numbers, a sigmoid makes them outputs,
* ``subnet_mem`` turns the hidden vector into the memory for the next iteration.

Two trials are trained with the same data and the same initial weights:

* ``trial_bugged_original_version`` applies the LeakyReLU after the *last* layer of every
  MLP as well. Negative numbers then only come out at 1% of their size, which hurts
  exactly where the network needs them: in front of the sigmoid.
* ``trial_no_activation_function_on_output_layer`` leaves the last layer linear.

The recorder calls are in ``_make_recorder``, ``_train_trial``, ``_one_step`` and
``SubNet.forward`` (defined in ``build_model``). Open the result with the command this script prints at the end;
The README's tutorial section walks through the GUI.

This module imports torch only inside functions: its paths and the example plugin are
usable without torch installed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from comgra_like.paths import TEST_RUN_GROUP, default_test_run_path, example_visualization_path

#: The group written by ``comgra-test-run`` when no ``--group`` is given.
DEFAULT_GROUP = TEST_RUN_GROUP
#: Default number of training steps per trial: both trials, recorded, in under three
#: minutes on a 2-core CPU even while something else keeps one core busy (measured: see
#: the README's tutorial).
DEFAULT_STEPS = 2400
#: ``--long``: five times as long; the loss curves flatten out.
LONG_STEPS = 12_000
DEFAULT_SEED = 0
#: Each type of execution (sequence length) is recorded at its first occurrence and then
#: about once per this many steps, but at least 4 and at most 16 more times per run.
STEPS_PER_RECORDING = 750

#: trial id -> whether the last layer of every MLP is followed by the activation (the bug)
TRIALS: dict[str, bool] = {
    "trial_bugged_original_version": True,
    "trial_no_activation_function_on_output_layer": False,
}

TRAINING_LENGTHS = tuple(range(1, 11))
TEST_LENGTHS = (15, 20)
TRAINING_SET_SIZE = 10_000
TEST_SET_SIZE = 2_000
BATCH_SIZE = 128
INPUT_SIZE = 5
HIDDEN_SIZE = 200
MEMORY_SIZE = 50
OUTPUT_SIZE = 5
LEARNING_RATE = 1e-3
LEAKY_RELU_SLOPE = 0.01
MAX_SAMPLES_TO_RECORD = 5


#: Path of the example plugin for ``comgra --visualization-file``.
visualization_file_path = example_visualization_path


def type_of_execution_for(length: int) -> str:
    """``01_iterations`` ... ``20_iterations``: zero-padded so that they sort by length."""
    return f"{length:02d}_iterations"


def gui_command(group_dir: str | os.PathLike) -> str:
    """The shell command that opens ``group_dir`` with the example visualization."""
    return shlex.join(
        [
            "comgra",
            "--path",
            str(Path(group_dir).absolute()),
            "--visualization-file",
            str(visualization_file_path()),
        ]
    )


# ---------------------------------------------------------------------------------------
# The network
# ---------------------------------------------------------------------------------------


def build_model(recorder: Any, activation_on_output_layer: bool):
    """Create the recurrent network (a ``torch.nn.Module`` called ``root_module`` later).

    The classes are defined in here so that importing this module does not import torch.
    """
    import torch
    from torch import nn

    class SubNet(nn.Module):
        """Linear -> LeakyReLU -> Linear (-> LeakyReLU again: the bug)."""

        def __init__(self, in_size: int, out_size: int):
            super().__init__()
            self.layer_in = nn.Linear(in_size, HIDDEN_SIZE)
            self.layer_out = nn.Linear(HIDDEN_SIZE, out_size)
            self.activation = nn.LeakyReLU(negative_slope=LEAKY_RELU_SLOPE)

        def forward(self, x):
            # Three instances of this class exist; get_name_of_module gives each its own
            # name ("root_module.subnet_pre", ...), which keeps the tensor names unique.
            name = recorder.get_name_of_module(self)
            hidden = self.activation(self.layer_in(x))
            recorder.register_tensor(f"{name}__hidden_state", hidden)
            out = self.layer_out(hidden)
            if activation_on_output_layer:
                out = self.activation(out)
            recorder.register_tensor(f"{name}__out", out)
            return out

    class RecurrentModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.subnet_pre = SubNet(INPUT_SIZE + MEMORY_SIZE, HIDDEN_SIZE)
            self.subnet_out = SubNet(HIDDEN_SIZE, OUTPUT_SIZE)
            self.subnet_mem = SubNet(HIDDEN_SIZE, MEMORY_SIZE)

        def forward(self, x, memory):
            hidden = self.subnet_pre(torch.cat([x, memory], dim=1))
            return self.subnet_out(hidden), self.subnet_mem(hidden)

    return RecurrentModel()


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


@dataclass
class SequenceSet:
    length: int
    is_training: bool
    inputs: Any  # float tensor (size, length, 5), uniform in [-1, 1]
    targets: Any  # float tensor (size, 5): 1.0 where the channel's sum is positive


def make_datasets(seed: int) -> list[SequenceSet]:
    """Training sets for lengths 1..10 and test sets for lengths 15 and 20."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    sets = []
    for length in TRAINING_LENGTHS + TEST_LENGTHS:
        is_training = length in TRAINING_LENGTHS
        size = TRAINING_SET_SIZE if is_training else TEST_SET_SIZE
        inputs = torch.rand((size, length, INPUT_SIZE), generator=generator) * 2 - 1
        targets = (inputs.sum(dim=1) > 0).float()
        sets.append(SequenceSet(length, is_training, inputs, targets))
    return sets


# ---------------------------------------------------------------------------------------
# Progress bar (plain text on stderr)
# ---------------------------------------------------------------------------------------


class _Progress:
    """A one-line progress bar; on a non-terminal stream, a line every 10 %."""

    def __init__(self, total: int, label: str, stream: TextIO | None, width: int = 30):
        self.total = max(total, 1)
        self.label = label
        self.stream = stream
        self.width = width
        self.start = time.monotonic()
        self.is_tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._last_draw = 0.0
        self._last_decile = -1

    def update(self, done: int) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if self.is_tty:
            if done < self.total and now - self._last_draw < 0.2:
                return
            self._last_draw = now
            self.stream.write("\r" + self._line(done, now))
        else:
            decile = done * 10 // self.total
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self.stream.write(self._line(done, now) + "\n")
        self.stream.flush()

    def _line(self, done: int, now: float) -> str:
        fraction = done / self.total
        filled = round(fraction * self.width)
        elapsed = now - self.start
        eta = elapsed / fraction - elapsed if fraction > 0 else float("nan")
        bar = "#" * filled + "-" * (self.width - filled)
        return (
            f"{self.label} [{bar}] {done}/{self.total} steps {fraction:4.0%} "
            f"{elapsed:5.1f}s elapsed, ~{eta:4.0f}s left "
        )

    def close(self) -> None:
        if self.stream is not None and self.is_tty:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------------------------
# Training with the recorder
# ---------------------------------------------------------------------------------------


@dataclass
class TrialSummary:
    trial_id: str
    steps: int
    seconds: float
    #: mean batch loss over the last 10 % of the steps, training lengths / test lengths
    final_training_loss: float
    final_test_loss: float
    losses: dict[str, list[float]] = field(default_factory=dict, repr=False)


def _recording_gap(steps: int, recordings_per_type: int | None) -> int:
    """Steps between two recordings of one type of execution.

    A multiple of the cycle length (12), so that every type is recorded equally often:
    at its first occurrence and ``recordings_per_type`` more times, the last of them in
    the final pass over the 12 sets.
    """
    if recordings_per_type is None:
        recordings_per_type = min(16, max(4, steps // STEPS_PER_RECORDING))
    cycle = len(TRAINING_LENGTHS) + len(TEST_LENGTHS)
    cycles = (steps - cycle) // max(recordings_per_type, 1) // cycle
    return max(1, cycles) * cycle


def _train_trial(
    recorder: Any,
    trial_id: str,
    activation_on_output_layer: bool,
    datasets: list[SequenceSet],
    steps: int,
    seed: int,
    progress: _Progress | None = None,
) -> TrialSummary:
    """Train one trial for ``steps`` steps, reporting everything to ``recorder``."""
    import torch

    torch.manual_seed(seed)  # the same initial weights for both trials
    sampler = torch.Generator().manual_seed(seed + 1)  # the same batches for both trials
    model = build_model(recorder, activation_on_output_layer)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    # Parameters are recorded automatically from now on, under names like
    # "root_module.subnet_pre.layer_in.weight"; modules get names for get_name_of_module.
    recorder.track_module("root_module", model)
    n_train = sum(len(d.inputs) for d in datasets if d.is_training)
    n_test = sum(len(d.inputs) for d in datasets if not d.is_training)
    recorder.add_note(f"{trial_id}: {steps} steps, Adam lr={LEARNING_RATE}, batch {BATCH_SIZE}")
    recorder.add_note(f"Training data: {n_train:,} sequences; test data: {n_test:,} sequences")
    for d in datasets:
        usage = "training" if d.is_training else "test (no optimizer step)"
        recorder.add_note(f"  length {d.length:2d}: {len(d.inputs):,} sequences, {usage}")

    losses: dict[str, list[float]] = {}
    start = time.monotonic()
    for step in range(steps):
        data = datasets[step % len(datasets)]  # the sequence length cycles over the sets
        index = torch.randint(0, len(data.inputs), (BATCH_SIZE,), generator=sampler)
        loss = _one_step(
            recorder, model, optimizer, step, trial_id, data.length, data.is_training,
            data.inputs[index], data.targets[index],
        )
        losses.setdefault(type_of_execution_for(data.length), []).append(loss)
        if progress is not None:
            progress.update(step + 1)
    recorder.finalize()
    seconds = time.monotonic() - start
    if progress is not None:
        progress.close()

    def final(lengths) -> float:
        tail = []
        for length in lengths:
            values = losses.get(type_of_execution_for(length), [])
            tail.extend(values[len(values) - max(1, len(values) // 10):])
        return float(sum(tail) / len(tail)) if tail else float("nan")

    return TrialSummary(
        trial_id, steps, seconds, final(TRAINING_LENGTHS), final(TEST_LENGTHS), losses
    )


def _one_step(recorder, model, optimizer, step, trial_id, length, is_training, inputs, targets):
    """One batch: ``length`` iterations, the loss on the last one. Returns the loss."""
    import torch

    batch_size = inputs.shape[0]
    # One type of execution per sequence length: the decision maker then records every
    # length regularly, and the GUI can show only the steps with, say, 5 iterations.
    # On steps it does not record, the recorder calls below return at once.
    recorder.start_batch(step, batch_size, type_of_execution=type_of_execution_for(length))
    # The memory is a hidden state, not an input: it exists before the first iteration.
    # It shares the node "memory" with the new memory that every iteration produces.
    memory = torch.zeros((batch_size, MEMORY_SIZE))
    recorder.register_tensor(
        "initial_memory", memory, node_name="memory", role_within_node="initial",
        is_initial_value=True,
    )
    loss_value = float("nan")
    for iteration in range(length):
        recorder.start_iteration()  # one dependency graph per iteration
        x = inputs[:, iteration, :]
        # Register a tensor before it is used, so that its uses end up in the graph.
        # The flags (is_input, is_target, is_loss) only decide the node's colour.
        recorder.register_tensor("input", x, is_input=True)
        out, memory = model(x, memory)  # SubNet.forward registers the subnets' tensors
        output = torch.sigmoid(out)
        recorder.register_tensor("output", output)
        recorder.register_tensor("new_memory", memory, node_name="memory", role_within_node="new")
        if iteration == length - 1:  # the loss only looks at the end of the sequence
            recorder.register_tensor("target", targets, is_target=True)
            # Helper values the network never computes itself: each channel's running sum.
            # One tensor per iteration, all in node "helper_partial_sums" with one role each.
            partial_sums = inputs.cumsum(dim=1).detach()
            for j in range(length):
                running_sum = partial_sums[:, j, :]
                recorder.register_tensor(
                    f"helper_partial_sums_{j:02d}",
                    running_sum,
                    node_name="helper_partial_sums",
                    role_within_node=f"up_to_iteration_{j:02d}",
                )
                # detach() cut the autograd link; draw the edge from the input by hand.
                recorder.add_tensor_connection(x, running_sum)
            # Per-sample losses tell which sequences are hard; the loss is their mean.
            loss_per_sample = ((output - targets) ** 2).mean(dim=1)
            recorder.register_tensor("loss_per_sample", loss_per_sample)
            loss = loss_per_sample.mean()
            recorder.register_tensor("loss", loss, is_loss=True)

            optimizer.zero_grad()
            loss.backward()
            if is_training:  # test sets: gradients are computed and recorded, nothing learns
                optimizer.step()
            # Store the .grad of every registered tensor and parameter (after backward).
            recorder.record_current_gradients("gradients")

            # KPIs for the Graphs page, on every step (the recorder thins them out itself).
            loss_value = loss.item()
            accuracy = ((output > 0.5).float() == targets).float().mean().item()
            recorder.record_kpi_in_graph(
                "loss", "mse", loss_value, record_even_if_recording_is_inactive=True
            )
            recorder.record_kpi_in_graph(
                "accuracy", "per_channel", accuracy, record_even_if_recording_is_inactive=True
            )
            if recorder.recording_is_active():  # a line on the Notes page per recorded step
                usage = "training" if is_training else "test"
                recorder.add_note(
                    f"{trial_id} step {step:6d}: {length:2d} iterations ({usage}), "
                    f"loss {loss_value:.5f}, accuracy {accuracy:.3f}"
                )
        recorder.finish_iteration()  # builds this iteration's dependency graph
    recorder.finish_batch()  # hands the step's data to the writer
    return loss_value


def run_tutorial_with_summaries(
    path: str | os.PathLike,
    group: str = DEFAULT_GROUP,
    steps: int = DEFAULT_STEPS,
    seed: int = DEFAULT_SEED,
    progress: bool = False,
    *,
    recordings_per_type: int | None = None,
    record_steps: Iterable[int] | None = None,
    trials: dict[str, bool] | None = None,
    progress_stream: TextIO | None = None,
) -> tuple[Path, list[TrialSummary]]:
    """Like :func:`run_tutorial`, but also returns one :class:`TrialSummary` per trial.

    ``recordings_per_type``: how often each type of execution is recorded after its first
    occurrence (default: one per :data:`STEPS_PER_RECORDING` steps, 4 to 16 times).
    ``record_steps``: record exactly these training steps instead.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    root = Path(path).expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    datasets = make_datasets(seed)
    trials = TRIALS if trials is None else trials
    summaries = []
    with _single_torch_thread():
        for number, (trial_id, activation_on_output_layer) in enumerate(trials.items(), 1):
            recorder = _make_recorder(root, group, trial_id, steps, recordings_per_type, record_steps)
            bar = None
            if progress:
                stream = progress_stream if progress_stream is not None else sys.stderr
                bar = _Progress(steps, f"{number}/{len(trials)} {trial_id}", stream)
            summaries.append(
                _train_trial(
                    recorder, trial_id, activation_on_output_layer, datasets, steps, seed, bar
                )
            )
    return root / group, summaries


def _make_recorder(root, group, trial_id, steps, recordings_per_type, record_steps):
    from comgra_like.objects import (
        DecisionMakerForRecordingsFrequencyPerType,
        DecisionMakerForRecordingsHardcoded,
    )
    from comgra_like.recorder import ComgraRecorder

    if record_steps is not None:
        decision_maker = DecisionMakerForRecordingsHardcoded(record_steps)
    else:
        # Every type of execution (sequence length) gets recorded regularly, however
        # rare it is; each type's first occurrence is recorded at once.
        decision_maker = DecisionMakerForRecordingsFrequencyPerType(
            min_training_steps_difference=_recording_gap(steps, recordings_per_type)
        )
    return ComgraRecorder(
        comgra_root_path=root,
        group=group,
        trial_id=trial_id,
        decision_maker_for_recordings=decision_maker,
        # One column of parameter nodes per subnet in the dependency graph ...
        prefixes_for_grouping_module_parameters_visually=[
            "root_module.subnet_pre",
            "root_module.subnet_out",
            "root_module.subnet_mem",
        ],
        # ... and the four parameters of subnet_pre merged into one node with four roles.
        prefixes_for_grouping_module_parameters_in_nodes=["root_module.subnet_pre"],
        # Values of single samples for the first 5 of each batch; batch statistics still
        # use all 128.
        max_num_batch_size_to_record=MAX_SAMPLES_TO_RECORD,
    )


@contextlib.contextmanager
def _single_torch_thread():
    """Run torch on one thread, then restore the previous setting.

    The matrices here are small (128 x 255 times 255 x 200): a second thread gains little,
    and on a 2-core machine where anything else is busy (the recorder's writer process, a
    GUI reading the run live) two torch threads were up to 10x slower than one.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_tutorial(
    path: str | os.PathLike,
    group: str = DEFAULT_GROUP,
    steps: int = DEFAULT_STEPS,
    seed: int = DEFAULT_SEED,
    progress: bool = False,
) -> Path:
    """Train and record both trials into ``<path>/<group>``; return that group directory.

    Trials already in the group with the same ids are replaced; other trials stay.
    """
    group_dir, _ = run_tutorial_with_summaries(path, group, steps, seed, progress)
    return group_dir


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    default_dir = default_test_run_path()
    parser = argparse.ArgumentParser(
        prog="comgra-test-run",
        description=(
            "Train the tutorial network twice (with the bug and without it) and record "
            "both runs for the comgra GUI."
        ),
    )
    parser.add_argument(
        "--steps", type=int, default=None,
        help=f"training steps per trial (default {DEFAULT_STEPS}: both trials in about a minute)",
    )
    parser.add_argument(
        "--long", action="store_true",
        help=f"train {LONG_STEPS} steps per trial, five times the default (flatter loss curves)",
    )
    parser.add_argument(
        "--path", default=None,
        help=f"directory that holds the group (default {default_dir.parent})",
    )
    parser.add_argument("--group", default=DEFAULT_GROUP, help=f"group name (default {DEFAULT_GROUP})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.steps is not None and args.long:
        print("comgra-test-run: use either --steps or --long, not both", file=sys.stderr)
        return 2
    steps = LONG_STEPS if args.long else (DEFAULT_STEPS if args.steps is None else args.steps)
    if steps < 1:
        print(f"comgra-test-run: --steps must be at least 1, got {steps}", file=sys.stderr)
        return 2
    root = Path(args.path).expanduser() if args.path else default_test_run_path().parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"comgra-test-run: cannot create {root}: {e}", file=sys.stderr)
        return 2
    if not os.access(root, os.W_OK):
        print(f"comgra-test-run: {root} is not writable; choose another --path", file=sys.stderr)
        return 2

    group_dir, summaries = run_tutorial_with_summaries(
        root, args.group, steps, args.seed, progress=not args.quiet
    )
    if not args.quiet:
        for s in summaries:
            print(
                f"{s.trial_id}: {s.steps} steps in {s.seconds:.0f} s; final loss "
                f"{s.final_training_loss:.3f} on training lengths, "
                f"{s.final_test_loss:.3f} on test lengths 15 and 20"
            )
    print(f"Recorded {len(summaries)} trials in {group_dir}")
    print("Open them in the GUI with:")
    print(f"  {gui_command(group_dir)}")
    if not args.quiet:
        print_findings(group_dir)
    return 0


def print_findings(group_dir: str | os.PathLike, stream: TextIO | None = None) -> None:
    """What ``comgra findings`` says at warning or above (the Findings page's list): on
    the tutorial's trials, the bug of ``trial_bugged_original_version`` once the network
    has learnt enough to show it (the output-range detector)."""
    from comgra_like.analysis import WARNING, at_least, find

    stream = sys.stdout if stream is None else stream
    found = at_least(find(group_dir), WARNING)
    if not found:
        print("Findings (comgra findings): none at warning or above.", file=stream)
        return
    print(f"Findings (comgra findings --path {group_dir}):", file=stream)
    for f in found:
        print(f"  {f.severity} {f.kind} in {f.trial_id}: {f.explanation}", file=stream)


if __name__ == "__main__":
    sys.exit(main())
