"""The writer is the only writer of a trial folder: trial.json, modules.json, notes, graph
structures and compaction arrive as messages; the training process opens nothing in the
folder for writing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq

from comgra_like.format.schema import FILE_SCHEMAS
from comgra_like.query import open_group

TRAINING = textwrap.dedent("""
    import json, os, sys
    trial = os.path.join(sys.argv[1], "g", "trials", "t")
    writes = []

    def audit(event, args):
        # every file or folder change this process makes inside the trial folder
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and isinstance(path, (str, bytes, os.PathLike)):
                target = os.fsdecode(path)
                if os.path.abspath(target).startswith(trial):
                    writes.append([event, target])
        elif event in ("os.rename", "os.replace", "os.mkdir", "os.remove", "os.rmdir",
                       "shutil.rmtree", "os.truncate"):
            target = os.fsdecode(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else ""
            if os.path.abspath(target).startswith(trial):
                writes.append([event, target])

    sys.addaudithook(audit)
    import torch
    from comgra_like.objects import DecisionMakerForRecordingsHardcoded
    from comgra_like.recorder import ComgraRecorder
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    rec = ComgraRecorder(sys.argv[1], "g", "t", DecisionMakerForRecordingsHardcoded(range(6)))
    rec.track_module("net", net)
    rec.add_note("before the first step")
    for step in range(6):
        x = torch.randn(5, 3)
        rec.start_batch(step, 5)
        rec.start_iteration()
        rec.register_tensor("x", x, is_input=True)
        out = net(x)
        rec.register_tensor("out", out)
        loss = out.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        loss.backward()
        rec.record_current_gradients("loss")
        rec.record_kpi_in_graph("train", "loss", loss)
        rec.finish_iteration()
        rec.finish_batch()
        if step == 3:
            rec.add_note("after step 3")
    rec.finalize()
    print(json.dumps(writes))
""")


def test_the_training_process_writes_nothing_into_the_trial_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COMGRA_LIKE_WRITER", "process")
    done = subprocess.run([sys.executable, "-c", TRAINING, str(tmp_path)], check=True,
                          capture_output=True, text=True, timeout=180)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    trial = tmp_path / "g/trials/t"
    # ... and yet everything is there, written by the writer process
    g = open_group(tmp_path / "g")
    [info] = g.list_trials()
    assert info.status == "finished"
    assert [m.name for m in g.read_modules("t")][:1] == ["net"]
    notes = g.read_notes("t")
    assert [n.text for n in notes] == ["before the first step", "after step 3"]
    assert [n.training_step for n in notes] == [None, 3]
    assert not (trial / "notes.jsonl").exists()
    [notes_file] = (trial / "notes").iterdir()  # shards, compacted at finalize()
    assert pq.read_schema(notes_file).equals(FILE_SCHEMAS["notes"])  # with the rank column
    hashes = set(g.list_steps("t")["graph_hash"])
    assert {p.stem for p in (trial / "graphs").iterdir()} == hashes  # one file per structure
    assert g.read_graph("t", 5, 0).nodes
    assert len(g.read_kpis("t")) == 6
    for kind in ("steps", "tensors", "kpis", "notes"):
        assert len(list((trial / kind).iterdir())) == 1, kind  # compacted by the writer
