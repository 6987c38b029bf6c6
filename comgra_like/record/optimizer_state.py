"""Statistics of an optimizer's per-parameter state after its step (docs/OPTIMIZER.md).

Pure functions of a parameter, its optimizer state and its param group; called by
``record/optimizer.py`` on recorded steps only, after ``optimizer.step()``. Every number
is computed in float64 and returned as a Python float (NaN where undefined).

Adam family (a state with ``exp_avg`` and ``exp_avg_sq``: Adam, AdamW, and others that
keep these two moments): with ``t`` the state's ``step`` after the update and
``(beta1, beta2)`` the group's ``betas``, ``v = exp_avg_sq`` (``max_exp_avg_sq`` with
``amsgrad``), ``v_hat = v / (1 - beta2**t)`` (no correction without ``betas``/``step``):

- ``exp_avg_*`` / ``exp_avg_sq_*``: mean, std (population, ddof 0), abs max, L2 norm;
- ``step_size_*``: ``lr / (sqrt(v_hat) + eps)`` per element (Adam's per-element learning
  rate; the first moment's correction ``1 / (1 - beta1**t)`` is not in it): mean, min, max;
- ``eps_dominated``: among the elements with ``v > 0`` (an element that never had a
  gradient is not updated by Adam's term at all), the share with ``sqrt(v_hat) < eps``:
  eps is the larger term of the denominator, so their update is set by eps rather than
  the gradient's scale (NaN when no element has ``v > 0``).

SGD with momentum (``momentum_buffer``): ``momentum_*`` mean, std, abs max, L2 norm.
"""

from __future__ import annotations

import math

import torch

MOMENT_STATS = ("mean", "std", "absmax", "norm")


def as_float(value) -> float:
    """A number of a param group or a state (a float, an int or a one-element tensor)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().reshape(-1)[0].item())
    return float(value)


def _moments(prefix: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
    x = t.detach().to(torch.float64)
    if x.numel() == 0:
        nan = torch.tensor(math.nan, dtype=torch.float64, device=x.device)
        return {f"{prefix}_{s}": nan for s in MOMENT_STATS}
    return {f"{prefix}_mean": x.mean(), f"{prefix}_std": x.std(correction=0),
            f"{prefix}_absmax": x.abs().max(), f"{prefix}_norm": torch.linalg.vector_norm(x)}


def is_adam_like(state: dict) -> bool:
    return isinstance(state.get("exp_avg"), torch.Tensor) and isinstance(
        state.get("exp_avg_sq"), torch.Tensor)


def adam_statistics(group: dict, state: dict) -> dict[str, torch.Tensor]:
    """The Adam-family quantities of one parameter (0-dimensional float64 tensors)."""
    out = _moments("exp_avg", state["exp_avg"])
    out.update(_moments("exp_avg_sq", state["exp_avg_sq"]))
    v = state["exp_avg_sq"]
    if group.get("amsgrad") and isinstance(state.get("max_exp_avg_sq"), torch.Tensor):
        v = state["max_exp_avg_sq"]
    v = v.detach().to(torch.float64)
    correction = 1.0
    betas = group.get("betas")
    if betas is not None and "step" in state:
        t = as_float(state["step"])
        beta2 = as_float(betas[1])
        if t > 0:
            correction = 1.0 - beta2 ** t
    eps = as_float(group.get("eps", 0.0))
    lr = as_float(group.get("lr", math.nan))
    root = (v / correction).sqrt() if correction > 0 else torch.full_like(v, math.nan)
    if v.numel() == 0:
        nan = torch.tensor(math.nan, dtype=torch.float64, device=v.device)
        out.update(step_size_mean=nan, step_size_min=nan, step_size_max=nan,
                   eps_dominated=nan)
        return out
    step_size = lr / (root + eps)
    out["step_size_mean"] = step_size.mean()
    out["step_size_min"] = step_size.min()
    out["step_size_max"] = step_size.max()
    seen = v > 0
    count = seen.sum()
    dominated = (seen & (root < eps)).sum()
    out["eps_dominated"] = torch.where(count > 0, dominated.to(torch.float64) / count,
                                       torch.full_like(out["step_size_mean"], math.nan))
    return out


def momentum_statistics(state: dict) -> dict[str, torch.Tensor]:
    """SGD's momentum buffer, when it has one (empty otherwise)."""
    buf = state.get("momentum_buffer")
    if not isinstance(buf, torch.Tensor):
        return {}
    return _moments("momentum", buf)


def state_statistics(group: dict, state: dict) -> dict[str, torch.Tensor]:
    """Every state quantity this module knows for one parameter (maybe none)."""
    if is_adam_like(state):
        return adam_statistics(group, state)
    return momentum_statistics(state)


def update_statistics(param: torch.Tensor, before: torch.Tensor) -> dict[str, torch.Tensor]:
    """The update the step made (``after - before``): its L2 norm, its abs max and the
    update/weight ratio ``||after - before|| / ||before||`` (NaN for a zero weight)."""
    after = param.detach().to(torch.float64)
    old = before.to(torch.float64)
    delta = after - old
    norm = torch.linalg.vector_norm(delta)
    weight = torch.linalg.vector_norm(old)
    absmax = delta.abs().max() if delta.numel() else norm
    ratio = torch.where(weight > 0, norm / weight, torch.full_like(norm, math.nan))
    return {"update_norm": norm, "update_absmax": absmax, "update_ratio": ratio}


def to_floats(values: list[torch.Tensor]) -> list[float]:
    """0-dimensional tensors as floats (in their order), one copy to the host per device (a copy per
    value would wait for a GPU once per value)."""
    by_device: dict[torch.device, list[int]] = {}
    for i, v in enumerate(values):
        by_device.setdefault(v.device, []).append(i)
    out = [math.nan] * len(values)
    for indices in by_device.values():
        numbers = torch.stack([values[i] for i in indices]).tolist()  # 0-dimensional
        for i, x in zip(indices, numbers):
            out[i] = x
    return out


def gradient_norms(params: list[torch.Tensor]) -> list[float | None]:
    """The L2 norm (float64) of each parameter's ``.grad`` now (None: no gradient)."""
    norms: list[torch.Tensor] = []
    where: list[int] = []
    for i, p in enumerate(params):
        g = p.grad
        if g is not None:
            norms.append(torch.linalg.vector_norm(g.detach().to(torch.float64)))
            where.append(i)
    out: list[float | None] = [None] * len(params)
    for i, v in zip(where, to_floats(norms)):
        out[i] = v
    return out


def total_norm(norms) -> float | None:
    """The global L2 norm of per-parameter norms (None entries left out)."""
    values = [v for v in norms if v is not None]
    if not values:
        return None
    return math.sqrt(sum(v * v for v in values))
