"""first_divergence on real recorded loops: two runs of one seed, each with one change that
takes effect at a known step, and two ranks of a DDP job with a replica that drifts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from comgra_like.analysis import first_divergence
from comgra_like.analysis.diff_cli import main as diff_main
from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.recorder import ComgraRecorder

STEPS = 10
CHANGE_AT = 6


def train(root: Path, trial: str, *, perturb_at: int | None = None,
          lr_from: tuple[int, float] | None = None, float64_at: int | None = None,
          every: int = 1) -> None:
    """A small MLP trained with one seed; one optional change from a known step:
    ``perturb_at`` adds 1e-3 to ``net.out.weight`` before that step; ``lr_from=(k, lr)``
    sets the learning rate from step k on; ``float64_at`` computes the hidden layer's
    matrix product in float64 (another library path: equal up to rounding)."""
    torch.manual_seed(0)
    net = nn.ModuleDict({"inp": nn.Linear(6, 12), "out": nn.Linear(12, 2)})
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    rec = ComgraRecorder(root, "g", trial,
                         DecisionMakerForRecordingsHardcoded(range(0, STEPS, every)),
                         max_num_batch_size_to_record=2,
                         calculate_svd_and_other_expensive_operations_of_parameters=False)
    rec.track_module("net", net)
    data = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(8, 6, generator=data)
        y = torch.randn(8, 2, generator=data)
        if perturb_at is not None and step == perturb_at:
            with torch.no_grad():
                net["out"].weight[0, 0] += 1e-3
        if lr_from is not None and step == lr_from[0]:
            for group in opt.param_groups:
                group["lr"] = lr_from[1]
        rec.start_batch(step, 8)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        if float64_at is not None and step >= float64_at:
            pre = (x.double() @ net["inp"].weight.double().T).float() + net["inp"].bias
        else:
            pre = net["inp"](x)
        rec.register_tensor("pre", pre)
        hidden = torch.tanh(pre)
        rec.register_tensor("hidden", hidden)
        out = net["out"](hidden)
        rec.register_tensor("out", out)
        rec.register_tensor("y", y, is_target=True)
        loss = (out - y).pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record_current_gradients("loss")
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()


@pytest.fixture(scope="module")
def group(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("divergence")
    train(root, "base")
    train(root, "same")
    train(root, "perturbed", perturb_at=CHANGE_AT)
    train(root, "lr", lr_from=(CHANGE_AT, 0.2))
    train(root, "float64", float64_at=CHANGE_AT)
    train(root, "sparse_perturbed", perturb_at=CHANGE_AT - 1, every=3)
    return root / "g"


def test_two_runs_of_one_seed_do_not_diverge(group):
    assert first_divergence(str(group), "base", "same", tolerance=0) is None


def test_a_perturbed_weight_is_named_at_the_step_it_was_changed(group):
    d = first_divergence(str(group), "base", "perturbed")
    assert d is not None
    assert (d.step, d.recording_type, d.last_equal_step) == (CHANGE_AT, "forward",
                                                            CHANGE_AT - 1)
    # The weight itself, stored before anything the step computed with it.
    assert (d.node, d.role, d.iteration) == ("net.out.weight", "net.out.weight", -1)
    assert d.value_a != d.value_b
    assert "first differ at step 6" in d.explain()


def test_a_changed_learning_rate_shows_first_in_the_updates(group):
    d = first_divergence(str(group), "base", "lr")
    assert d is not None
    # Step 6's values and gradients are those of the same weights: only its update differs.
    assert (d.step, d.recording_type) == (CHANGE_AT, "update")
    assert d.relative_difference > 1


def test_another_library_path_is_found_with_a_tight_tolerance_and_named_in_graph_order(group):
    d = first_divergence(str(group), "base", "float64", tolerance=0)
    assert d is not None
    assert (d.step, d.recording_type, d.node) == (CHANGE_AT, "forward", "pre")
    # The per-neuron values of both sides, read for the named tensor: rounding-sized.
    assert d.values_max_abs_difference is not None
    assert 0 < d.values_max_abs_difference < 1e-5
    # Rounding only: invisible at the default tolerance until it has grown.
    loose = first_divergence(str(group), "base", "float64", tolerance=1e-2)
    assert loose is None or loose.step > CHANGE_AT


def test_sparse_recordings_name_the_first_recorded_step_after_the_change(group):
    d = first_divergence(str(group), "base", "sparse_perturbed")
    # Recorded steps 0, 3, 6, 9; the change came before step 5: step 6 is the first seen.
    assert (d.step, d.last_equal_step, d.steps_compared) == (6, 3, 4)


def test_bad_arguments_are_clear_errors(group):
    with pytest.raises(NotFoundError, match="no trial 'nope'"):
        first_divergence(str(group), "base", "nope")
    with pytest.raises(ConfigurationError, match="rank_a and rank_b"):
        first_divergence(str(group), "base")
    with pytest.raises(ConfigurationError, match="tolerance"):
        first_divergence(str(group), "base", "same", tolerance=-1)


def test_comgra_diff_prints_it_and_json(group, capsys):
    assert diff_main(["--path", str(group), "base", "perturbed"]) == 1
    assert "first differ at step 6" in capsys.readouterr().out
    assert diff_main(["--path", str(group), "base", "same", "--json", "--tolerance", "0"]) == 0
    assert json.loads(capsys.readouterr().out) == {"divergence": None}
    assert diff_main(["--path", str(group), "base", "lr", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)["divergence"]
    assert (out["step"], out["recording_type"]) == (CHANGE_AT, "update")
    assert diff_main(["--path", str(group), "base", "nope"]) == 2
    assert "no trial 'nope'" in capsys.readouterr().err


def test_the_comgra_command_hands_diff_over(group):
    """The installed console script, as a user runs it."""
    comgra = Path(sys.executable).with_name("comgra")
    done = subprocess.run([str(comgra), "diff", "--path", str(group), "base", "perturbed",
                           "--json"], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["divergence"]["step"] == CHANGE_AT
