"""Reading an S3 group while the store is briefly away (issue 28, "an S3 outage
survived", the reader's side): a fresh open either lists every trial or raises a clear
StorageError, never a listing with a trial silently left out; a refresh during the outage
reports what it could not read and keeps what it knew; the next refresh after it lists
every trial and every step, without a restart; no file is marked damaged for it.

The outage is real: a relay in front of the moto server (gate.py) that refuses
connections and cuts the open ones. The query API reads through ``GatedFiles``, an
``ObjectFiles`` that shuts the relay just before (or after) the request a test chooses,
so that the store goes away between two requests of one refresh."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

import comgra_like.query.index as index_module
import comgra_like.query.metrics as metrics_module
import comgra_like.query.tensors as tensors_module
import comgra_like.query.watch as watch_module
from comgra_like.errors import StorageError
from comgra_like.format.files import ObjectFiles, s3_options
from comgra_like.query import open_group
from tests.conftest import TinyRun
from tests.s3.conftest import use_server
from tests.s3.gate import Gate

TRIALS = ["trial_a", "trial_b"]
RECORD = [0, 1, 3, 4]
SERIES = ("output", "output", "forward", "batch_mean", "mean")


class GatedFiles(ObjectFiles):
    """The store as the query API sees it; shuts the relay before (or after) the
    requests a test names, once each; ``blip``: only during that request."""

    def __init__(self, gate: Gate):
        # one try per request: a refused connection fails at once (the SDK's retries
        # would only make the test slower; the reader's handling is the same)
        super().__init__(pafs.S3FileSystem(
            **s3_options(), retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1)))
        self.gate = gate
        self.before: list[tuple[str, str]] = []
        self.after: list[tuple[str, str]] = []
        self.blip: list[tuple[str, str]] = []

    def _shut(self, rules: list[tuple[str, str]], method: str, path) -> None:
        for rule in list(rules):
            if rule[0] == method and rule[1] in str(path):
                rules.remove(rule)
                self.gate.close()

    def list_folders(self, folder):
        self._shut(self.before, "list_folders", folder)
        names = super().list_folders(folder)
        self._shut(self.after, "list_folders", folder)
        return names

    def read_json(self, path):
        self._shut(self.before, "read_json", path)
        return super().read_json(path)

    def read_parquet(self, path, schema=None, **options):
        self._shut(self.before, "read_parquet", path)
        blip = ("read_parquet", next((p for m, p in self.blip if p in str(path)), None))
        if blip[1] is None:
            return super().read_parquet(path, schema, **options)
        self.blip.remove(blip)
        self.gate.close()
        try:
            return super().read_parquet(path, schema, **options)
        finally:
            self.gate.open()


@pytest.fixture
def root(gate, monkeypatch) -> str:
    """Two finished trials recorded through the relay, a shard per step."""
    root = use_server(monkeypatch, gate.endpoint)
    for seed, trial_id in enumerate(TRIALS):
        run = TinyRun(root, "g", trial_id, record_steps=RECORD, seed=seed)
        for step in range(5):
            run.step(step)
            run.recorder.flush()
        run.finalize()
    return root


@pytest.fixture
def gated(gate, root, monkeypatch) -> GatedFiles:
    """Every group the query API opens from now on reads through a GatedFiles."""
    files = GatedFiles(gate)
    for module in (index_module, tensors_module, watch_module, metrics_module):
        monkeypatch.setattr(module, "files_for", lambda path: files)
    return files


def _ids(group) -> list[str]:
    return [t.trial_id for t in group.list_trials()]


def _whole(group) -> None:
    """Every trial and every step listed and read; nothing skipped."""
    assert _ids(group) == TRIALS
    for trial_id in TRIALS:
        steps = sorted({int(s) for s in group.list_steps(trial_id)["training_step"]})
        assert steps == RECORD, trial_id
        assert sorted(group.read_series(trial_id, *SERIES)["training_step"]) == RECORD
    assert group.skipped == []


def _fresh_listing(path: str) -> list[str] | None:
    """What a fresh open lists; None when it raised a clear StorageError instead."""
    try:
        group = open_group(path)
    except StorageError as e:
        assert "could not be read" in str(e) or "cannot" in str(e), str(e)
        return None
    return _ids(group)


def _could_not_read_now(group) -> list[str]:
    return [s.path for s in group.skipped if "could not be read now" in s.reason]


def test_a_fresh_open_while_the_store_is_away_is_a_storage_error(gate, root):
    gate.close()
    with pytest.raises(StorageError, match="s3://"):
        open_group(f"{root}/g")
    gate.open()
    _whole(open_group(f"{root}/g"))


def test_a_store_that_goes_away_after_the_listing_never_hides_a_trial(gate, root, gated):
    gated.after.append(("list_folders", "/g/trials"))
    listed = _fresh_listing(f"{root}/g")
    assert listed is None or listed == TRIALS, listed
    gate.open()
    # a Group kept open (the GUI's) refreshes through the outage and after it
    group = open_group(f"{root}/g", refresh=False)
    gated.after.append(("list_folders", "/g/trials"))
    group.refresh()  # no exception: what could not be read is reported
    assert _could_not_read_now(group)
    gate.open()
    group.refresh()  # no restart
    _whole(group)


def test_a_trial_json_whose_read_failed_after_its_look_up_is_listed_once_back(
        gate, root, gated):
    group = open_group(f"{root}/g", refresh=False)
    gated.before.append(("read_json", "trial_b/trial.json"))
    group.refresh()
    assert "trial_b" not in _ids(group)
    assert any(p.endswith("trial_b/trial.json") for p in _could_not_read_now(group))
    gate.open()
    report = group.refresh()
    assert "trial_b" in report.new_trials
    _whole(group)
    assert group.refresh().skipped == []


@pytest.mark.parametrize("blip", [False, True])
def test_a_shard_whose_read_failed_once_is_read_at_the_next_refresh(gate, root, gated,
                                                                    blip):
    group = open_group(f"{root}/g", refresh=False)
    # the store away from that read on, or for that one request alone
    (gated.blip if blip else gated.before).append(("read_parquet", "trial_a/steps/"))
    group.refresh()
    assert "trial_a/steps/" in " ".join(_could_not_read_now(group))
    steps = sorted({int(s) for s in group.list_steps("trial_a")["training_step"]})
    assert steps == [], steps  # not read yet
    if not blip:
        gate.open()
    group.refresh()
    _whole(group)


def test_a_tensor_read_while_the_store_is_away_raises_and_reads_once_back(
        gate, root, gated):
    group = open_group(f"{root}/g")
    gate.close()
    with pytest.raises(StorageError, match="could not be read now"):
        group.read_series("trial_a", *SERIES)
    assert _could_not_read_now(group)
    gate.open()
    assert sorted(group.read_series("trial_a", *SERIES)["training_step"]) == RECORD
    group.refresh()
    _whole(group)
