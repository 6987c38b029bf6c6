"""GUI memory with one large tensor (issue 28, item 5): records a trial whose linear
activation has ``--elements`` values per sample (per-neuron values stored, the default), then opens it
in a fresh process through the GUI's data layer (``AppData``) and reports that process's
peak memory (VmHWM) after each part of showing a step: the group opened, the step's
listing (``tensor_index``: what the Tensors page asks first) and one row's values (the sample)
(``read_tensor``).

    python benchmarks/benchmark_large_tensor.py [--elements 20000000] [--keep DIR]
        [--cache-mb 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEASURE = r"""
import json, sys, time
from comgra_like.app.data import AppData

def peak_mb():
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec (the recording parent's)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

path, cache_mb = sys.argv[1], float(sys.argv[2])
out = {}
data = AppData(path, cache_bytes=int(cache_mb * 2**20))
data.refresh()
trial = data.group.list_trials()[0].trial_id
out["opened_mb"] = peak_mb()
t = time.perf_counter()
index = data.tensor_index(trial, 1)
out["listing_s"] = time.perf_counter() - t
out["after_listing_mb"] = peak_mb()
frame = data.group.list_tensors(trial, 1)
row = frame[(frame["node"].astype(str) == "y") & (frame["aggregation"].astype(str) == "sample")].iloc[0]
t = time.perf_counter()
record = data.group.read_tensor(trial, 1, int(row.iteration), str(row.node), str(row.role),
                                str(row.recording_type), str(row.aggregation),
                                int(row.sample_index))
out["read_tensor_s"] = time.perf_counter() - t
out["values"] = int(record.values.size)
out["after_read_tensor_mb"] = peak_mb()
out["rows_listed"] = len(frame)
print(json.dumps(out))
"""


def record(root: Path, elements: int) -> None:
    import torch

    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder

    torch.manual_seed(0)
    fan_in = 1000
    # y has ``elements`` values per sample: every row of it (batch mean, abs max, std, the
    # sample; forward and gradient) stores that many per-neuron values
    w = torch.nn.Parameter(0.01 * torch.randn(fan_in, max(1, elements // fan_in)))
    net = torch.nn.Module()
    net.w = w
    rec = ComgraRecorder(root, "g", "large", DecisionMakerForRecordingsHardcoded([0, 1]),
                         max_num_batch_size_to_record=1,
                         calculate_svd_and_other_expensive_operations_of_parameters=False)
    rec.track_module("net", net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(2):
        rec.start_batch(step, 2)
        rec.start_iteration()
        x = torch.randn(2, fan_in)
        rec.register_tensor("x", x, is_input=True)
        y = (x[:, :, None] * w).reshape(2, -1)
        rec.register_tensor("y", y)
        loss = y.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("loss")
        opt.step()
        rec.finish_iteration()
        rec.finish_batch()
    rec.finalize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=20_000_000)
    parser.add_argument("--keep", type=Path, help="record here (else a temporary folder); "
                        "a folder with the trial already is measured as it is")
    parser.add_argument("--cache-mb", type=float, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="comgra-large-") as tmp:
        root = args.keep or Path(tmp)
        if not (root / "g").exists():
            t = time.perf_counter()
            record(root, args.elements)
            print(f"recorded {args.elements:,} values per sample in {time.perf_counter() - t:.1f} s")
        files = sorted((root / "g" / "trials" / "large" / "tensors").glob("*.parquet"))
        import pyarrow.parquet as pq
        for f in files:
            meta = pq.read_metadata(f)
            print(f"{f.name}: {f.stat().st_size / 2**20:.0f} MB, {meta.num_rows} rows, "
                  f"{meta.num_row_groups} row groups")
        result = subprocess.run([sys.executable, "-c", MEASURE, str(root / "g"),
                                 str(args.cache_mb)], check=False, capture_output=True,
                                text=True)
        if result.returncode:
            sys.exit(result.stderr)
        out = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
