"""first_divergence between two ranks of one real DDP job (two gloo processes): replicas
that stay in step agree; a replica that drifts is named at the step it drifted. The same
through ``comgra diff TRIAL --rank-a R --rank-b R`` (its main and the installed command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from comgra_like.analysis import first_divergence
from comgra_like.analysis.diff_cli import main as diff_main

from .test_ddp import run_job


@pytest.mark.slow
def test_a_drifting_replica_is_found_and_in_step_replicas_agree(tmp_path, capsys):
    synced, drifting = tmp_path / "synced", tmp_path / "drifting"
    run_job(synced, "ddp")
    run_job(drifting, "ddp-desync")
    # Gradients are all-reduced, so the replicas' parameters, gradients and updates agree
    # bitwise while every rank sees other data.
    assert first_divergence(str(synced / "g"), "t", rank_a=0, rank_b=1, tolerance=0) is None
    d = first_divergence(str(drifting / "g"), "t", rank_a=0, rank_b=1)
    assert d is not None
    # Rank 1 changed its replica's second.weight before step 2.
    assert (d.step, d.last_equal_step, d.recording_type) == (2, 1, "forward")
    assert d.node.endswith("second.weight")
    assert (d.rank_a, d.rank_b) == (0, 1)
    assert "ranks 0 and 1 of trial 't'" in d.explain()

    # comgra diff --rank-a/--rank-b: the same answers, exit 0 / 1 / 2
    ranks = ["--rank-a", "0", "--rank-b", "1"]
    capsys.readouterr()
    assert diff_main(["--path", str(synced / "g"), "t", *ranks, "--tolerance", "0",
                      "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"divergence": None}
    assert diff_main(["--path", str(drifting / "g"), "t", *ranks]) == 1
    text = capsys.readouterr().out
    assert "ranks 0 and 1 of trial 't' first differ at step 2" in text
    assert "second.weight" in text
    assert diff_main(["--path", str(drifting / "g"), "t", *ranks, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)["divergence"]
    assert found == json.loads(json.dumps(d.to_dict()))
    assert (found["rank_a"], found["rank_b"], found["step"]) == (0, 1, 2)
    # the ranks the other way round: the same step, the sides swapped
    assert diff_main(["--path", str(drifting / "g"), "t", "--rank-a", "1", "--rank-b", "0",
                      "--json"]) == 1
    swapped = json.loads(capsys.readouterr().out)["divergence"]
    assert (swapped["rank_a"], swapped["rank_b"], swapped["step"]) == (1, 0, 2)
    assert (swapped["value_a"], swapped["value_b"]) == (found["value_b"], found["value_a"])
    # one trial without both ranks, or a rank the job did not have: exit 2, said why
    assert diff_main(["--path", str(drifting / "g"), "t", "--rank-a", "0"]) == 2
    assert "rank_a and rank_b" in capsys.readouterr().err
    assert diff_main(["--path", str(drifting / "g"), "t", "--rank-a", "0",
                      "--rank-b", "7"]) == 2
    assert capsys.readouterr().err.startswith("comgra diff: error:")
    # the installed command, as a user runs it
    comgra = Path(sys.executable).with_name("comgra")
    done = subprocess.run([str(comgra), "diff", "--path", str(drifting / "g"), "t", *ranks,
                           "--json"], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["divergence"]["step"] == 2
