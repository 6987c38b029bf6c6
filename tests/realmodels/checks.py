"""What every real-model recording must satisfy, as functions the tests call on a (bare,
watched) pair of runs."""

from __future__ import annotations

import math

import numpy as np

from comgra_like.analysis import WARNING, at_least, find
from comgra_like.query import open_group

from . import models
from .conftest import LOG_FREQ, STEPS

RECORDED = list(range(0, STEPS, LOG_FREQ))


def same_training(bare: models.Run, watched: models.Run) -> None:
    """Watching changed nothing: every parameter and buffer bitwise equal, the same
    losses (training and validation)."""
    assert models.same_parameters(bare.model, watched.model) == []
    assert bare.losses == watched.losses
    assert bare.validation_losses == watched.validation_losses


def every_module_recorded(case: models.Case, watched: models.Run) -> None:
    """Each module one forward calls has its inputs/outputs recorded at every recorded
    step, and each parameter its values and gradients."""
    h = open_group(watched.group).read_histograms(watched.trial)
    train = h[h.type_of_execution != "validation"]
    assert sorted(set(train.training_step)) == RECORDED
    for step in RECORDED:
        at = train[train.training_step == step]
        io = {n.split("#")[0] for n in at[at.what == "io"].module}
        missing = models.called_modules(case) - io
        assert not missing, (step, sorted(missing))
        grads = {n.split("#")[0] for n in at[at.what == "io_grad"].module}
        assert models.ROOT in grads


def every_parameter_recorded(watched: models.Run, *, holders: bool) -> None:
    """Every parameter's values and gradients (frozen ones: values) at every recorded
    step: under the module that is recorded for it, or (``holders``) under every module
    holding it (tied)."""
    h = open_group(watched.group).read_histograms(watched.trial, what=["params", "params_grad"])
    assert not h.empty
    expected = models.parameter_holders(watched.model)
    if not holders:
        seen_ids, unique = set(), set()
        for name, module in watched.model.named_modules(remove_duplicate=False):
            for p_name, p in module.named_parameters(recurse=False):
                if id(p) not in seen_ids:
                    seen_ids.add(id(p))
                    unique.add((f"{models.ROOT}.{name}" if name else models.ROOT, p_name))
        expected = unique
    frozen = {(f"{models.ROOT}.{name}" if name else models.ROOT, p_name)
              for name, module in watched.model.named_modules(remove_duplicate=False)
              for p_name, p in module.named_parameters(recurse=False) if not p.requires_grad}
    for what in ("params", "params_grad"):
        wanted = expected - frozen if what == "params_grad" else expected
        for step in RECORDED:
            rows = h[(h.what == what) & (h.training_step == step)]
            got = set(zip(rows.module, rows.role))
            assert wanted <= got, (what, step, sorted(wanted - got)[:10])


def histograms_exact(watched: models.Run) -> None:
    """Every value counted (sample_n=None, no outliers dropped): a parameter's histogram
    counts its elements, a module output's the output's elements (batch included)."""
    group = open_group(watched.group)
    h = group.read_histograms(watched.trial)
    counted = np.array([int(c.sum()) for c in h.counts])
    assert (counted == h.n.to_numpy()).all()
    sizes = {}
    for name, module in watched.model.named_modules(remove_duplicate=False):
        for p_name, p in module.named_parameters(recurse=False):
            sizes[(f"{models.ROOT}.{name}" if name else models.ROOT, p_name)] = p.numel()
    params = h[h.what.isin(["params", "params_grad"])]
    for node, role, n in zip(params.module, params.role, params.n):
        assert n == sizes[(node, role)], (node, role, n)
    # module outputs against the shapes of the module graph (-1: the batch)
    graph = group.read_module_graph(watched.trial, RECORDED[0])
    shapes = {(inv["id"], o["role"]): o["shape"] for inv in graph["invocations"]
              for o in inv["outputs"] if o.get("shape")}
    io = h[(h.what == "io") & (h.training_step == RECORDED[0])
           & (h.type_of_execution != "validation")]
    checked = 0
    for node, role, n in zip(io.module, io.role, io.n):
        shape = shapes.get((node, role))
        if shape is None:
            continue
        size = math.prod(models.BATCH if d == -1 else d for d in shape)
        assert n == size, (node, role, n, shape)
        checked += 1
    assert checked >= len(shapes) // 2, (checked, len(shapes))


def metrics_on_schedule(watched: models.Run) -> None:
    """WeightRMS of every Linear at steps 1, 4, 7 and the loss at every step, as the
    metric config and the loop asked."""
    m = open_group(watched.group).read_metrics(watched.trial)
    linear = {f"{models.ROOT}.{n}" if n else models.ROOT
              for n, mod in watched.model.named_modules() if type(mod).__name__ == "Linear"}
    assert linear
    rms = m[m.metric == "WeightRMS"]
    assert set(rms.module) == linear
    for module in linear:
        rows = rms[rms.module == module]
        assert sorted(rows.training_step) == list(range(1, STEPS, 3)), module
        assert np.isfinite(rows.value).all() and (rows.value > 0).all()
    loss = m[m.metric == "loss"].sort_values("training_step")
    assert list(loss.training_step) == list(range(STEPS))
    np.testing.assert_allclose(loss.value, watched.losses, rtol=1e-6)


def no_warnings(watched: models.Run) -> None:
    """No finding of warning or error severity on a healthy model."""
    found = at_least(find(watched.group), WARNING)
    assert found == [], [f"{f.kind} {f.node}: {f.explanation}" for f in found]
