"""`comgra findings`: the real command in a subprocess, its exit status and its JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import EXAMPLE_RUN, FIXED_TRIAL

COMGRA = Path(sys.executable).with_name("comgra")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(COMGRA), "findings", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_nan_fails_the_command_and_the_json_names_it(recorded):
    group = recorded("log_of_zero", zero_at=7)
    done = run("--path", str(group), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] is True and report["fail_on"] == "error"
    assert report["trials"] == ["log_of_zero"] and report["counts"]["error"] >= 1
    first = report["findings"][0]
    assert first["kind"] == "first_non_finite" and first["severity"] == "error"
    assert first["steps"] == [7] and first["node"] == "z_log_positive"
    assert first["where"]["training_step"] == 7 and first["numbers"]["last_finite_step"] == 6
    # The text form says the same in a line per finding.
    text = run("--path", str(group))
    assert text.returncode == 1
    assert "ERROR    first_non_finite  log_of_zero step 7 z_log_positive" in text.stdout


def test_the_chosen_severity_decides(recorded):
    group = str(recorded("dying_relu", kill_at=6))  # a warning (dead units), no error
    assert run("--path", group).returncode == 0
    assert run("--path", group, "--fail-on", "warning").returncode == 1
    assert run("--path", group, "--fail-on", "error", "--trial", "dying_relu").returncode == 0


def test_the_healthy_example_run_passes():
    # the fixed trial; the bugged one has its bug named (tests/analysis/test_outputs.py)
    done = run("--path", str(EXAMPLE_RUN), "--trial", FIXED_TRIAL, "--fail-on", "warning",
               "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] is False and report["counts"] == {"error": 0, "warning": 0,
                                                              "info": 0}


def test_bad_paths_and_trials_are_errors_that_say_what_to_pass(tmp_path):
    missing = run("--path", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    empty = run("--path", str(tmp_path))
    assert empty.returncode == 2 and "holds no trials" in empty.stderr
    trial = run("--path", str(EXAMPLE_RUN), "--trial", "no_such_trial")
    assert trial.returncode == 2
    assert "no trial 'no_such_trial'" in trial.stderr and "trial_bugged_original_version" \
        in trial.stderr
    usage = run("--path", str(EXAMPLE_RUN), "--fail-on", "fatal")
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_a_damaged_file_is_named_and_the_rest_scanned(tmp_path):
    group = tmp_path / "tutorial"
    shutil.copytree(EXAMPLE_RUN, group)
    shard = min((group / "trials" / "trial_bugged_original_version" / "tensors")
                .glob("*.parquet"))
    shard.write_bytes(b"not parquet")
    done = run("--path", str(group), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [Path(s["path"]).name for s in report["skipped_files"]] == [shard.name]
    assert f"skipped a damaged file, its data is not scanned: {shard}" in done.stderr
