"""What ``watch()`` cannot record of a ``torch.compile``d module (docs/OPTIMIZER.md,
"torch.compile"): its submodules run inside the compiled graph, so the driver
(``record/hooks.py``) hooks the compiled module alone and the watch report says why."""

from __future__ import annotations

import torch


def compiled_detail(module: torch.nn.Module) -> str | None:
    """What watching a ``torch.compile``d module cannot record (None: not compiled)."""
    if type(module).__name__ != "OptimizedModule":
        return None
    inner = dict(module.named_children()).get("_orig_mod")
    what = type(inner).__name__ if inner is not None else "the module"
    return (f"{what} is compiled (torch.compile): its submodules run inside the compiled "
            "graph, where module hooks cannot run without breaking it, so only the compiled "
            "module's own inputs, outputs and their gradients are recorded, with every "
            "parameter, its gradient and the optimizer's state; the submodules' inputs, "
            "outputs and io_grad are not (watch the model before compiling it, or compile "
            "its submodules, to record them)")
