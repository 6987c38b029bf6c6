"""first_divergence between two ranks of one real DDP job (two gloo processes): replicas
that stay in step agree; a replica that drifts is named at the step it drifted."""

from __future__ import annotations

import pytest

from comgra_like.analysis import first_divergence

from .test_ddp import run_job


@pytest.mark.slow
def test_a_drifting_replica_is_found_and_in_step_replicas_agree(tmp_path):
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
