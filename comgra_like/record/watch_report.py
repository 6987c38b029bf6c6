"""The watch report of a ``Watcher`` (``record/hooks.py``): which modules were hooked,
which have no data and why, and what else a reader of the recording should know (the
validation trial, internal failures of the hooks). Stored with every change
(``protocol.WatchReport``, ``Group.read_watch_report``), logged once."""

from __future__ import annotations

# REASONS a module has no data (the watch report)
IGNORED_CLASS = "ignored class"
NO_TENSOR_OUTPUT = "no tensor output"
NEVER_CALLED = "never called"
EVAL_MODE = "eval mode"
NO_GRADIENT = "no gradient reached it"
NO_AUTOGRAD = "ran without gradients"
CHECKPOINT_OUTPUT = "checkpointed forward"
COMPILED = "compiled"


def build_report(w) -> dict:
    """The report of watcher ``w`` now."""
    skipped = []
    names = sorted(set(w.names.values()))
    compiled = getattr(w, "compiled", None)  # torch.compile: only the root is hooked
    for name in names:
        if name in w.ignored:
            skipped.append({"module": name, "reason": IGNORED_CLASS,
                            "detail": "ignore_io_grad_classes: its io_grad is not recorded"})
    if w.steps_recorded:
        for name in names:
            if compiled is not None and name != w.root:
                continue  # reported as compiled below
            if name not in w.called:
                skipped.append({"module": name, "reason": NEVER_CALLED,
                                "detail": "not called in any recorded step"})
            elif name in w.without_output and name not in w.with_output:
                skipped.append({"module": name, "reason": NO_TENSOR_OUTPUT,
                                "detail": "returned no floating-point tensor"})
        for name in sorted(w.no_gradient - w.got_gradient):
            skipped.append({"module": name, "reason": NO_GRADIENT,
                            "detail": "no output of it received a gradient in the "
                                      "recorded backward passes"})
        for name in sorted(w.not_replayed - w.got_gradient):
            skipped.append({"module": name, "reason": NO_AUTOGRAD,
                            "detail": "called without gradients inside a training forward "
                                      "(torch.no_grad(), or reentrant checkpointing whose "
                                      "recomputation the backward did not run): no io_grad, "
                                      "and no module graph edges through its inside"})
        for name in sorted(w.checkpointed):
            skipped.append({"module": name, "reason": CHECKPOINT_OUTPUT,
                            "detail": "its forward ran under reentrant checkpointing: the "
                                      "io_grad and module graph edges inside it come from the "
                                      "recomputation in the backward, but the edges from "
                                      "inside it to its output are missing (the recomputed "
                                      "output is not visible to module hooks; "
                                      "use_reentrant=False records them)"})
    if compiled is not None:
        for name in names:
            if name != w.root:
                skipped.append({"module": name, "reason": COMPILED, "detail": compiled})
    if w.eval_skipped is not None:
        skipped.append({"module": w.root, "reason": EVAL_MODE,
                        "detail": f"validation passes are not recorded: {w.eval_skipped}"})
    report: dict = {
        "root": w.root,
        "hooked": names,
        "attached": sorted(w.attached),
        "skipped": skipped,
        "steps_recorded": w.steps_recorded,
        "log": list(w.s.log),
        "log_freq": w.s.log_freq,
        "eval_mode": w.s.eval_mode,
        "time_unit": w.s.time_name,
    }
    if w.val_rec is not None:
        report["validation_trial"] = w.val_rec.trial_id
    if compiled is not None:
        report["compiled"] = compiled
    optimizer = getattr(w, "optimizer", None)
    if optimizer is not None:
        report["optimizer"] = optimizer.report()
    failures = w.guard.summary()
    if failures is not None:
        report["internal_errors"] = failures
    return report


def summary_line(report: dict) -> str:
    """The one line logged when the first step is recorded."""
    reasons: dict[str, int] = {}
    for x in report["skipped"]:
        reasons[x["reason"]] = reasons.get(x["reason"], 0) + 1
    return (f"comgra_like.watch: {len(report['hooked'])} modules of {report['root']} "
            "hooked; " + (", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
                          or "none skipped")
            + " (the watch report: Group.read_watch_report)")
