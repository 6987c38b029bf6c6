"""Every built-in quantity against an independent torch formula (issue 16).

Each test computes the quantity with comgra_like.metrics (numpy, float64) and again with
torch from the definition (torch.cov, torch.linalg.svdvals, vector_norm, ...), on random
inputs of several shapes and ranks (hypothesis draws the shapes and seeds) and on
degenerate ones: constant input, rank-deficient covariance, zero gradients, one sample.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from comgra_like.errors import ConfigurationError
from comgra_like.metrics import spectra
from comgra_like.metrics.quantities import (
    QUANTITIES,
    ModuleData,
    aggregate,
    band,
    features_2d,
    get_quantity,
)

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
COV_SUFFIXES = {"CovMaxEig": None, "CovStableRank": None, "CovCondition": None,
                "CovCondition20": 0.2, "CovCondition50": 0.5, "CovCondition80": 0.8}


def run(name: str, data: ModuleData, state: dict | None = None):
    return QUANTITIES[name].compute(data, {} if state is None else state)


def close(ours: float, theirs: float, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    if math.isnan(theirs):
        return math.isnan(ours)
    return math.isclose(ours, theirs, rel_tol=rel, abs_tol=abs_)


def low_rank(rng: np.random.Generator, n: int, d: int, rank: int) -> np.ndarray:
    """n samples of d features whose covariance has rank <= rank (plus a mean)."""
    return (rng.standard_normal((n, rank)) @ rng.standard_normal((rank, d))
            + rng.standard_normal(d))


# --- the reference formulas (torch, float64, from the definitions) ----------------------

def torch_spectrum(x2d: torch.Tensor) -> torch.Tensor:
    """Taiyi's eigenvalues: singular values of torch.cov(X.T), descending."""
    return torch.linalg.svdvals(torch.cov(x2d.double().T).reshape(x2d.shape[1], -1))


def torch_cov_quantity(suffix: str, x2d: torch.Tensor) -> float:
    s = torch_spectrum(x2d)
    if suffix == "CovMaxEig":
        return s[0].item()
    if suffix == "CovStableRank":
        return 0.0 if s[0] == 0 else (s.sum() / s[0]).item()
    fraction = COV_SUFFIXES[suffix]
    index = s.numel() - 1 if fraction is None else math.floor(s.numel() * fraction)
    return (s[0] / (s[index].abs() + 1e-7)).item()


def conv_rows(x: torch.Tensor) -> torch.Tensor:
    """(N, C, *spatial) -> one row per sample and position, channels as features."""
    return x.movedim(1, -1).reshape(-1, x.shape[1])


# --- covariance family ------------------------------------------------------------------

@SETTINGS
@given(n=st.integers(2, 80), d=st.integers(1, 40), rank=st.integers(1, 40),
       seed=st.integers(0, 2**31 - 1))
def test_covariance_quantities_match_torch_on_linear_inputs(n, d, rank, seed):
    rng = np.random.default_rng(seed)
    x = low_rank(rng, n, d, min(rank, d)).astype(np.float32)
    g = rng.standard_normal((n, d)).astype(np.float32)
    data = ModuleData("Linear", input=x, output_grad=g)
    for prefix, array in (("Input", x), ("OutputGrad", g)):
        reference = torch.from_numpy(array)
        top = torch_spectrum(reference)[0].item()
        for suffix in COV_SUFFIXES:
            ours = run(prefix + suffix, data)
            theirs = torch_cov_quantity(suffix, reference)
            if "Condition" in suffix and top > 0:
                # compare the denominators |lambda_k| + 1e-7: eigenvalues in the null
                # space are rounding noise (~1e-16 * lambda_1 * d) in either method
                ours, theirs = top / ours, top / theirs
                assert close(ours, theirs, rel=1e-9, abs_=1e-13 * d * top), (
                    prefix + suffix, n, d, rank, ours, theirs)
                continue
            assert close(ours, theirs, rel=1e-9, abs_=1e-9 * max(top, 1.0)), (
                prefix + suffix, n, d, rank, ours, theirs)
        spectrum = run(prefix + "CovSpectrum", data)
        expected = torch_spectrum(reference).numpy()[: spectra.DEFAULT_TOP_K]
        np.testing.assert_allclose(spectrum, expected, rtol=1e-9, atol=1e-9 * max(top, 1.0))


@SETTINGS
@given(n=st.integers(1, 6), c=st.integers(1, 12), h=st.integers(1, 6), w=st.integers(1, 6),
       seed=st.integers(0, 2**31 - 1))
def test_conv_inputs_use_one_row_per_position(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    data = ModuleData("Conv2d", input=x)
    rows = conv_rows(torch.from_numpy(x))
    np.testing.assert_array_equal(features_2d(x, "Conv2d"), rows.numpy())
    if rows.shape[0] < 2:
        assert math.isnan(run("InputCovMaxEig", data))
        return
    for suffix in ("CovMaxEig", "CovStableRank", "CovCondition50"):
        ours = run("Input" + suffix, data)
        theirs = torch_cov_quantity(suffix, rows)
        assert close(ours, theirs, rel=1e-6, abs_=1e-9), (suffix, ours, theirs)


def test_taiyi_view_of_conv_inputs_mixes_positions_and_ours_does_not():
    """Taiyi reshapes (N, C, H, W) with transpose(0, 1).view(-1, C): its "channels" are
    runs of positions. A channel that is constant (here channel 0 = 5.0 everywhere) has
    zero variance for us; Taiyi's view spreads it over every column."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    x[:, 0] = 5.0
    ours = features_2d(x, "Conv2d")
    assert np.all(ours[:, 0] == 5.0)
    taiyi = torch.from_numpy(x).transpose(0, 1).contiguous().view(-1, 3).numpy()
    assert not np.all(taiyi[:, 0] == 5.0)
    ours_spectrum = spectra.exact_spectrum(ours)
    assert ours_spectrum[-1] == pytest.approx(0.0, abs=1e-12)
    assert spectra.exact_spectrum(taiyi)[-1] > 0.1


def test_sequence_inputs_of_linear_layers_keep_the_last_axis_as_features():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(features_2d(x, "Linear"), x.reshape(6, 4))
    np.testing.assert_array_equal(features_2d(x, "Conv1d"),
                                  np.moveaxis(x, 1, -1).reshape(8, 3))
    np.testing.assert_array_equal(features_2d(x, "BatchNorm1d"),
                                  np.moveaxis(x, 1, -1).reshape(8, 3))


@pytest.mark.parametrize("prefix", ["Input", "OutputGrad"])
def test_constant_input_and_zero_gradient_have_a_zero_spectrum(prefix):
    array = np.full((16, 8), 3.0 if prefix == "Input" else 0.0, dtype=np.float32)
    data = ModuleData("Linear", input=array, output_grad=array)
    assert run(prefix + "CovMaxEig", data) == 0.0
    assert run(prefix + "CovStableRank", data) == 0.0
    for percent in ("", "20", "50", "80"):
        assert run(f"{prefix}CovCondition{percent}", data) == 0.0
    assert np.all(run(prefix + "CovSpectrum", data) == 0.0)


def test_rank_deficient_covariance_has_exact_zeros_beyond_its_rank():
    rng = np.random.default_rng(3)
    x = low_rank(rng, 50, 20, 4)
    data = ModuleData("Linear", input=x)
    spectrum = spectra.exact_spectrum(x)
    reference = torch_spectrum(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(spectrum[:4], reference[:4], rtol=1e-10)
    assert np.all(np.abs(spectrum[4:]) < 1e-10 * spectrum[0])
    assert run("InputCovStableRank", data) == pytest.approx(reference.sum() / reference[0])
    # lambda_20 is in the null space: the condition number is lambda_1 / ~1e-7
    assert run("InputCovCondition50", data) == pytest.approx(reference[0] / 1e-7, rel=1e-6)


def test_wide_layer_on_a_small_batch_uses_the_small_gram_matrix_exactly():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 300))
    spectrum = spectra.exact_spectrum(x)
    assert spectrum.shape == (300,)
    reference = torch_spectrum(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(spectrum[:7], reference[:7], rtol=1e-10)
    assert spectrum[7] < 1e-12 * spectrum[0]  # the centering's null direction
    assert np.all(spectrum[8:] == 0.0)  # padded: beyond the 8 x 8 Gram matrix


def test_one_sample_leaves_the_covariance_undefined():
    x = np.ones((1, 5), dtype=np.float32)
    data = ModuleData("Linear", input=x, output_grad=x)
    for prefix in ("Input", "OutputGrad"):
        for suffix in COV_SUFFIXES:
            assert math.isnan(run(prefix + suffix, data)), prefix + suffix
    assert math.isnan(run("InputStd", ModuleData("Linear", input=np.ones(1))))
    assert run("InputSndNorm", data) == pytest.approx(math.sqrt(5))


def test_randomized_path_above_the_bound(monkeypatch):
    """Above EXACT_MAX_DIM the top of the spectrum comes from subspace iteration; the
    trace stays exact, so the stable rank's error is the top eigenvalue's."""
    rng = np.random.default_rng(5)
    d = 120
    decay = 0.8 ** np.arange(d)
    x = rng.standard_normal((400, d)) * np.sqrt(decay)
    monkeypatch.setattr(spectra, "EXACT_MAX_DIM", 50)
    data = ModuleData("Linear", input=x)
    reference = torch_spectrum(torch.from_numpy(x)).numpy()
    assert run("InputCovMaxEig", data) == pytest.approx(reference[0], rel=1e-8)
    assert run("InputCovStableRank", data) == pytest.approx(reference.sum() / reference[0],
                                                            rel=1e-8)
    np.testing.assert_allclose(run("InputCovSpectrum", data)[:10], reference[:10], rtol=1e-6)
    assert "input:top" in data.cache
    # the condition numbers index into the whole spectrum: computed exactly
    assert run("InputCovCondition80", data) == pytest.approx(
        reference[0] / (reference[math.floor(0.8 * d)] + 1e-7), rel=1e-8)


@pytest.mark.parametrize("shape", [(500, 200), (2000, 64), (300, 300)])
def test_top_spectrum_error_against_the_exact_spectrum(shape):
    """The randomized top-k against eigvalsh, on a decaying spectrum (a trained layer's
    typical shape) and on white noise (the hardest case: no gap)."""
    rng = np.random.default_rng(6)
    n, d = shape
    decaying = rng.standard_normal((n, d)) * (0.9 ** np.arange(d))
    exact = spectra.exact_spectrum(decaying)[:10]
    top = spectra.top_spectrum(decaying, k=10)
    assert np.max(np.abs(top - exact) / exact) < 1e-6
    noise = rng.standard_normal((n, d))
    exact = spectra.exact_spectrum(noise)
    top = spectra.top_spectrum(noise, k=10)
    assert abs(top[0] - exact[0]) / exact[0] < 0.02
    assert np.all(top <= exact[:10] * (1 + 1e-9))  # Ritz values never exceed the truth


# --- norms, moments, ranks --------------------------------------------------------------

@SETTINGS
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=4),
       seed=st.integers(0, 2**31 - 1))
def test_norms_and_moments_match_torch(shape, seed):
    rng = np.random.default_rng(seed)
    arrays = {name: rng.standard_normal(shape).astype(np.float32)
              for name in ("input", "output", "output_grad", "weight", "weight_grad",
                           "bias")}
    arrays["bias_grad"] = rng.standard_normal(shape[:1]).astype(np.float32)
    data = ModuleData("Linear", **{k: v for k, v in arrays.items() if k != "bias_grad"},
                      extra={"bias_grad": arrays["bias_grad"]})
    t = {k: torch.from_numpy(v).double() for k, v in arrays.items()}
    norm = torch.linalg.vector_norm
    output = t["output"]
    per_sample = output.reshape(1, -1) if output.dim() == 1 else output.flatten(1)
    expected = {
        "WeightNorm": norm(t["weight"]), "WeightGradNorm": norm(t["weight_grad"]),
        "InputSndNorm": norm(t["input"]), "OutputGradSndNorm": norm(t["output_grad"]),
        "BiasGradNorm": norm(t["bias_grad"]),
        "OutputNorm": per_sample.norm(dim=1).mean(),
        "OutputRMS": (per_sample.norm(dim=1) / math.sqrt(per_sample.shape[1])).mean(),
        "OutputGradRMS": norm(t["output_grad"]) / math.sqrt(t["output"].numel()),
        "WeightRMS": t["weight"].pow(2).mean().sqrt(),
        "WeightGradRMS": t["weight_grad"].pow(2).mean().sqrt(),
        "InputMean": t["input"].mean(),
        "InputStd": t["input"].std() if t["input"].numel() > 1 else torch.tensor(math.nan),
    }
    for name, value in expected.items():
        assert close(run(name, data), value.item(), rel=1e-9), name


def test_extra_arrays_are_reported_when_missing():
    with pytest.raises(ConfigurationError, match="'weight' was not captured"):
        run("WeightNorm", ModuleData("Linear", input=np.ones((2, 2))))
    with pytest.raises(ConfigurationError, match="bn_running_var. was not captured"):
        run("MeanTID", ModuleData("BatchNorm2d"))


def test_unknown_quantity_lists_the_known_ones():
    with pytest.raises(ConfigurationError, match="InputCovMaxEig.*WeightStableRank"):
        get_quantity("InputCovMaxEigen")


@SETTINGS
@given(n=st.integers(1, 30), units=st.integers(1, 20), seq=st.sampled_from([None, 3]),
       seed=st.integers(0, 2**31 - 1))
def test_linear_dead_neuron_num_matches_torch(n, units, seq, seed):
    rng = np.random.default_rng(seed)
    shape = (n, units) if seq is None else (n, seq, units)
    y = (rng.standard_normal(shape) * 2 - rng.uniform(0, 4, units)).astype(np.float32)
    t = torch.from_numpy(y).reshape(-1, units)
    expected = (t <= -2).all(dim=0).double().mean().item()
    assert run("LinearDeadNeuronNum", ModuleData("Linear", output=y)) == expected


@SETTINGS
@given(n=st.integers(1, 30), d=st.integers(1, 30), rank=st.integers(1, 30),
       conv=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_rankme_matches_torch(n, d, rank, conv, seed):
    rng = np.random.default_rng(seed)
    y = low_rank(rng, n, d, min(rank, d))
    if conv:
        y = y.reshape(n, d, 1, 1) * np.ones((1, 1, 2, 3))
    t = torch.from_numpy(y).reshape(n, -1)
    s = torch.linalg.svdvals(t)
    p = s / s.sum() + 1e-7
    expected = torch.exp(-(p * p.log()).sum()).item()
    # ours takes singular values from the smaller Gram matrix: values in the null space
    # come out as ~1e-8 sigma_1 instead of ~1e-16 sigma_1, against RankMe's 1e-7 floor
    assert close(run("RankMe", ModuleData("Linear", output=y)), expected, rel=1e-6)


def test_rankme_of_a_zero_output_is_undefined():
    assert math.isnan(run("RankMe", ModuleData("Linear", output=np.zeros((4, 3)))))


@SETTINGS
@given(out=st.integers(1, 20), fan_in=st.integers(1, 20), kernel=st.sampled_from([0, 1, 3]),
       seed=st.integers(0, 2**31 - 1))
def test_weight_stable_rank_matches_torch(out, fan_in, kernel, seed):
    rng = np.random.default_rng(seed)
    shape = (out, fan_in) if kernel == 0 else (out, fan_in, kernel, kernel)
    w = rng.standard_normal(shape)
    t = torch.from_numpy(w).reshape(out, -1)
    expected = (torch.linalg.matrix_norm(t, "fro") ** 2
                / torch.linalg.matrix_norm(t, 2) ** 2).item()
    assert close(run("WeightStableRank", ModuleData("Linear", weight=w)), expected, rel=1e-9)


def test_weight_stable_rank_of_rank_one_and_zero_weights():
    u, v = np.arange(1.0, 5.0), np.arange(1.0, 4.0)
    assert run("WeightStableRank", ModuleData("Linear", weight=np.outer(u, v))) == (
        pytest.approx(1.0))
    assert run("WeightStableRank", ModuleData("Linear", weight=np.eye(6))) == (
        pytest.approx(6.0))
    assert run("WeightStableRank", ModuleData("Linear", weight=np.zeros((3, 3)))) == 0.0


# --- batch norm: MeanTID and VarTID (arXiv 2210.05153) ------------------------------------

@pytest.mark.parametrize("layout", ["1d", "2d"])
def test_tid_matches_a_real_batch_norm(layout):
    """Train a real BatchNorm for T steps, collect each step's batch statistics the way
    the contract says (per channel, unbiased variance), then compare with the definition
    computed in torch from the module's own running statistics."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(5) if layout == "2d" else torch.nn.BatchNorm1d(5)
    means, variances = [], []
    for step in range(7):
        shape = (16, 5, 4, 4) if layout == "2d" else (16, 5)
        x = torch.randn(shape) * (1 + step) + step
        bn(x)
        per_channel = x.transpose(0, 1).reshape(5, -1)
        means.append(per_channel.mean(1))
        variances.append(per_channel.var(1))
    mu = torch.stack(means).double()
    sigma = torch.stack(variances).double().sqrt()
    run_mean, run_sigma = bn.running_mean.double(), bn.running_var.double().sqrt()
    mean_tid = ((mu - run_mean).norm(dim=1) / (run_sigma.norm() + 1e-8)).mean().item()
    var_tid = ((sigma - run_sigma).norm(dim=1) / (run_sigma.norm() + 1e-8)).mean().item()
    data = ModuleData(type(bn).__name__, extra={
        "bn_batch_mean": mu.numpy().astype(np.float32),
        "bn_batch_var": torch.stack(variances).numpy(),
        "bn_running_mean": bn.running_mean.numpy(), "bn_running_var": bn.running_var.numpy()})
    assert run("MeanTID", data) == pytest.approx(mean_tid, rel=1e-6)
    assert run("VarTID", data) == pytest.approx(var_tid, rel=1e-6)
    assert mean_tid > 0.1 and var_tid > 0.1  # the shifting data gives a real mismatch
    assert QUANTITIES["MeanTID"].applies_to("BatchNorm2d")
    assert not QUANTITIES["MeanTID"].applies_to("Linear")


def test_tid_is_zero_when_batches_match_the_running_statistics():
    data = ModuleData("BatchNorm1d", extra={
        "bn_batch_mean": np.array([[1.0, 2.0]]), "bn_batch_var": np.array([[4.0, 9.0]]),
        "bn_running_mean": np.array([1.0, 2.0]), "bn_running_var": np.array([4.0, 9.0])})
    assert run("MeanTID", data) == 0.0
    assert run("VarTID", data) == 0.0


# --- stateful quantities ------------------------------------------------------------------

def test_weight_param_jump_counts_sign_flips_since_the_previous_computation():
    """A real training loop: the count equals torch's sign comparison of copies taken at
    each computation (Taiyi compares the live parameter with itself: always 0)."""
    torch.manual_seed(1)
    layer = torch.nn.Linear(20, 20)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    state: dict = {}
    previous = None
    counts = []
    for step in range(6):
        loss = layer(torch.randn(8, 20)).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 2 == 0:  # the schedule linear(2, 0)
            weight = layer.weight.detach().clone()
            ours = run("WeightParamJump", ModuleData("Linear", weight=weight.numpy()), state)
            if previous is None:
                assert math.isnan(ours)
            else:
                expected = int(((weight.sign() * previous.sign()) < 0).sum())
                assert ours == expected
                counts.append(ours)
            previous = weight
    assert sum(counts) > 0  # lr 0.5 flips some signs: a constant 0 would fail here


def test_correlations_against_torch_cosine_similarity():
    rng = np.random.default_rng(7)
    grads = [rng.standard_normal((4, 6)) for _ in range(4)]
    grads[2] = -grads[1]  # opposite: -1
    for name, field in (("OutputGradCorrelation", "output_grad"),
                        ("WeightGradCorrelation", "weight_grad")):
        state: dict = {}
        values = [run(name, ModuleData("Linear", **{field: g}), state) for g in grads]
        assert math.isnan(values[0])
        for i in range(1, 4):
            expected = torch.nn.functional.cosine_similarity(
                torch.from_numpy(grads[i]).flatten(), torch.from_numpy(grads[i - 1]).flatten(),
                dim=0).item()
            assert values[i] == pytest.approx(expected, rel=1e-9)
        assert values[2] == pytest.approx(-1.0)
    state = {}
    run("BiasGradCorrelation", ModuleData("Linear", extra={"bias_grad": np.ones(3)}), state)
    assert run("BiasGradCorrelation",
               ModuleData("Linear", extra={"bias_grad": np.full(3, 2.0)}), state) == (
        pytest.approx(1.0))


def test_zero_gradients_have_no_direction():
    state: dict = {}
    zero = ModuleData("Linear", output_grad=np.zeros((3, 4)))
    run("OutputGradCorrelation", zero, state)
    assert math.isnan(run("OutputGradCorrelation", zero, state))
    assert run("OutputGradSndNorm", zero) == 0.0
    assert run("OutputGradRMS", zero) == 0.0


def test_update_geometry_against_torch_in_a_real_loop():
    torch.manual_seed(2)
    layer = torch.nn.Linear(10, 5)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    states: dict[str, dict] = {name: {} for name in (
        "WeightUpdateNorm", "WeightUpdateRMS", "WeightUpdateCorrelation", "BiasUpdateNorm",
        "BiasUpdateCorrelation")}
    snapshots = []
    for step in range(5):
        loss = layer(torch.randn(16, 10)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        w, b = layer.weight.detach().clone(), layer.bias.detach().clone()
        snapshots.append((w, b))
        data = ModuleData("Linear", weight=w.numpy(), bias=b.numpy())
        got = {name: run(name, data, state) for name, state in states.items()}
        if step == 0:
            assert all(math.isnan(v) for v in got.values())
            continue
        (w1, b1), (w0, b0) = [(w.double(), b.double()) for w, b in snapshots[-2:]][::-1]
        dw, db = w1 - w0, b1 - b0
        assert got["WeightUpdateNorm"] == pytest.approx(dw.norm().item(), rel=1e-9)
        assert got["WeightUpdateRMS"] == pytest.approx(dw.pow(2).mean().sqrt().item(), rel=1e-9)
        assert got["BiasUpdateNorm"] == pytest.approx(db.norm().item(), rel=1e-9)
        if step == 1:
            assert math.isnan(got["WeightUpdateCorrelation"])
            continue
        w00, b00 = (t.double() for t in snapshots[-3])
        cos = torch.nn.functional.cosine_similarity
        assert got["WeightUpdateCorrelation"] == pytest.approx(
            cos(dw.flatten(), (w0 - w00).flatten(), dim=0).item(), rel=1e-9)
        assert got["BiasUpdateCorrelation"] == pytest.approx(
            cos(db, b0 - b00, dim=0).item(), rel=1e-9)
        assert got["WeightUpdateCorrelation"] > 0.5  # momentum keeps the direction


# --- dead and saturated units ---------------------------------------------------------------

@SETTINGS
@given(n=st.integers(1, 10), c=st.integers(1, 8), conv=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_dead_relu_units_match_torch(n, c, conv, seed):
    rng = np.random.default_rng(seed)
    shape = (n, c, 3, 3) if conv else (n, c)
    pre = rng.standard_normal(shape) - rng.uniform(-1, 3, size=(1, c) + (1,) * (len(shape) - 2))
    out = torch.relu(torch.from_numpy(pre))
    per_unit = out.movedim(1, -1).reshape(-1, c)
    expected_dead = (per_unit == 0).all(dim=0).double().mean().item()
    expected_rate = (per_unit != 0).double().mean().item()
    data = ModuleData("ReLU", output=out.numpy())
    assert run("DeadUnitFraction", data) == expected_dead
    assert run("SaturatedUnitFraction", data) == expected_dead  # ReLU's bound is 0
    assert run("ActivationRate", data) == pytest.approx(expected_rate)


@pytest.mark.parametrize("cls,fn,bounds", [("Sigmoid", torch.sigmoid, (0.0, 1.0)),
                                           ("Tanh", torch.tanh, (-1.0, 1.0))])
def test_saturated_units_of_bounded_activations(cls, fn, bounds):
    torch.manual_seed(3)
    scale = torch.tensor([0.1, 1.0, 100.0, 100.0, -100.0, 0.0])
    shift = torch.tensor([0.0, 0.0, 100.0, -0.5, 50.0, 0.0])
    out = fn(torch.randn(32, 6).abs() * scale + shift).float()
    low, high = bounds
    hit = torch.isclose(out, torch.tensor(low)) | torch.isclose(out, torch.tensor(high))
    expected = hit.all(dim=0).double().mean().item()
    data = ModuleData(cls, output=out.numpy())
    assert run("SaturatedUnitFraction", data) == expected
    assert expected > 0  # columns 2 and 4 saturate
    assert run("DeadUnitFraction", data) == (out == 0).all(dim=0).double().mean().item()


# --- aggregation --------------------------------------------------------------------------

def test_aggregate_min_is_the_minimum_and_nans_are_ignored():
    values = [3.0, 1.0, math.nan, 2.0, 10.0]
    clean = torch.tensor([3.0, 1.0, 2.0, 10.0], dtype=torch.float64)
    assert aggregate(values, "min") == 1.0  # monitorch's list aggregation gives 10 here
    assert aggregate(values, "max") == 10.0
    assert aggregate(values, "mean") == pytest.approx(clean.mean().item())
    assert aggregate(values, "std") == pytest.approx(clean.std(correction=0).item())
    assert aggregate(values, "median") == pytest.approx(clean.quantile(0.5).item())
    assert band(values, "min-max") == (1.0, 10.0)
    low, high = band(values, "std")
    assert high - low == pytest.approx(2 * clean.std(correction=0).item())
    assert math.isnan(aggregate([math.nan], "mean"))
    with pytest.raises(ConfigurationError, match="unknown aggregation"):
        aggregate(values, "average")


def test_every_quantity_is_documented_and_tested_here():
    for name, quantity in QUANTITIES.items():
        assert quantity.formula and quantity.meaning and quantity.reference, name
        assert quantity.needs, name
    with open(__file__, encoding="utf-8") as handle:
        source = handle.read()
    untested = [name for name in QUANTITIES
                if f'"{name}"' not in source and not any(
                    name.endswith(suffix) for suffix in (*COV_SUFFIXES, "CovSpectrum"))]
    assert untested == []


def test_the_readme_table_has_one_row_per_quantity():
    from comgra_like.metrics.quantities import markdown_table
    rows = markdown_table().splitlines()[2:]
    assert [row.split(" | ")[0].lstrip("| ").split(" (")[0] for row in rows] == list(QUANTITIES)
    assert all(row.count(" | ") == 4 for row in rows)  # pipes inside cells are escaped


def test_the_docs_show_the_table_as_the_definitions_render_it():
    """docs/METRICS.md carries the table; a changed definition must be rendered there too
    (paste markdown_table()'s output)."""
    from pathlib import Path

    from comgra_like.metrics.quantities import markdown_table
    page = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"
    assert markdown_table() in page.read_text(encoding="utf-8")
