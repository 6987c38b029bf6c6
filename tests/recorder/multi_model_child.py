"""A training script as comgra users write it to compare models (issue 14, item 4): several
models trained one after another in one process, each with its own local recorder in the
same group, every batch recorded (``override__recording_is_active=True``), ``finalize()``
per model. Run by tests/recorder/test_comgra_scripts.py as a real process.

Usage: ``python multi_model_child.py ROOT GROUP MODELS STEPS [--keep-recorders]``; with
``--keep-recorders`` the script keeps every finished recorder in a list (as a script does
that reports on them at the end), which must not keep the models' memory alive.
After each model it prints
one JSON line: the writer's pid, this process's child processes, which objects of the
finished model are still alive, the open file descriptors, the shared-memory files left
and the resident memory.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import weakref
from pathlib import Path

import torch

from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.recorder import ComgraRecorder

WIDTH = 1024  # two 1024x1024 layers: ~8 MB of parameters, ~25 MB with Adam's state


def children_of(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (zombies included: they were not reaped)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # the command name is in parentheses and may hold spaces: fields follow the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def rss_bytes() -> int:
    """Resident memory after the C allocator gave back what it could: what is still in
    use, not what glibc keeps in its per-thread arenas for later."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the figure includes the allocator's reserve
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def train(root: str, group: str, name: str, steps: int) -> dict:
    """One model, one local recorder; returns weak references to what must be freed."""
    torch.manual_seed(len(name))
    model = torch.nn.Sequential(torch.nn.Linear(16, WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(WIDTH, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    recorder = ComgraRecorder(
        comgra_root_path=root, group=group, trial_id=name,
        # records rarely on its own: the override records every batch
        decision_maker_for_recordings=DecisionMakerForRecordingsFrequencyPerType(1000),
        max_num_batch_size_to_record=2,
        prefixes_for_grouping_module_parameters_visually=["model."],
        prefixes_for_grouping_module_parameters_in_nodes=["model."],
        calculate_svd_and_other_expensive_operations_of_parameters=False,
    )
    recorder.add_note(f"Model: {name}")
    recorder.track_module("model", model)
    for step in range(steps):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        recorder.start_batch(step, 8, override__recording_is_active=True)
        recorder.start_iteration()
        recorder.register_tensor("input", x, is_input=True)
        recorder.register_tensor("target", y, is_target=True)
        out = model(x)
        recorder.register_tensor("output", out)
        loss = torch.nn.functional.mse_loss(out, y)
        recorder.register_tensor("loss", loss, is_loss=True)
        recorder.record_kpi_in_graph("loss", "", loss)
        loss.backward()
        recorder.record_current_gradients("main")
        optimizer.step()
        optimizer.zero_grad()
        recorder.finish_iteration()
        recorder.finish_batch()
    recorder.finalize()
    return {
        "recorder": recorder,
        "writer_pid": recorder.writer.pid,
        "refs": {"model": weakref.ref(model), "recorder": weakref.ref(recorder),
                 "optimizer": weakref.ref(optimizer),
                 "weight": weakref.ref(model[2].weight), "output": weakref.ref(out)},
    }


def main() -> int:
    root, group, models, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    keep = "--keep-recorders" in sys.argv[5:]
    kept = []
    for i in range(models):
        result = train(root, group, f"model_{i}", steps)
        refs = result.pop("refs")
        recorder = result.pop("recorder")
        if keep:
            kept.append(recorder)
        del recorder
        gc.collect()
        prefix = f"comgra_like-{os.getpid()}-"
        shm = [f for d in ("/dev/shm", "/tmp") if os.path.isdir(d)
               for f in os.listdir(d) if f.startswith(prefix)]
        # segments still mapped into this process (their files may be deleted already)
        mapped = [line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1]
                  for line in Path("/proc/self/maps").read_text().splitlines()
                  if prefix in line]
        print(json.dumps({
            "model": i,
            "writer_pid": result["writer_pid"],
            "children": children_of(os.getpid()),
            "alive": sorted(name for name, ref in refs.items() if ref() is not None),
            "fds": len(os.listdir("/proc/self/fd")),
            "shm_files": shm,
            "mapped_segments": sorted(set(mapped)),
            "rss": rss_bytes(),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
