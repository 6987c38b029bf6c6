"""Import of vnittest's flow_info.pkl through the restricted unpickler
(comgra_like/format/vnittest.py): real vnittest-shaped files land in the flows store;
pickles that would run code or build other objects are refused, and nothing runs."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest

from comgra_like.errors import StorageError, UnsafePickleError
from comgra_like.format.vnittest import import_flow_info, read_flow_info, safe_load
from comgra_like.query import open_group

# The example of vnittest's README: conv1 (4x4) -> conv2 (2x2) -> conv3 (1x1)
CONV1 = np.array([[3.97, 3.98, 3.97, 3.97], [3.98, 4.0, 3.98, 3.98],
                  [3.97, 3.98, 3.97, 3.97], [3.97, 3.98, 3.97, 3.97]], dtype=np.float32)
FLOW_1_2 = np.random.default_rng(0).uniform(0.99, 1.0, size=(16, 4)).astype(np.float32)


def flow_info() -> dict:
    return {"activation_gradients": {
                "conv2": np.array([[15.88, 15.9], [15.9, 15.93]], dtype=np.float32),
                "conv3": np.array([[4.0]], dtype=np.float32), "conv1": CONV1},
            "gradient_flows": {("conv2", "conv3"): np.ones((4, 1), dtype=np.float32),
                               ("conv1", "conv2"): FLOW_1_2}}


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_vnittest_file_is_imported_into_the_flow_store(tmp_path, protocol):
    pkl = tmp_path / "flow_info.pkl"
    pkl.write_bytes(pickle.dumps(flow_info(), protocol=protocol))
    group_dir = tmp_path / "group"
    group_dir.mkdir()
    ids = import_flow_info(pkl, group_dir, "vnittest_run")
    group = open_group(group_dir)
    (trial,) = group.list_trials()
    assert trial.trial_id == "vnittest_run" and trial.settings["imported_from"] == "vnittest"
    infos = group.read_flows("vnittest_run")
    assert [i.record_id for i in infos] == ids
    assert [(i.source, i.target, i.origin) for i in infos] == [
        ("conv2", "conv3", "vnittest"), ("conv1", "conv2", "vnittest")]
    f = group.read_flow("vnittest_run", ids[1])
    # target first, each side shaped like the layer's map: (2, 2) + (4, 4)
    assert f.flow.shape == (2, 2, 4, 4)
    np.testing.assert_array_equal(f.flow.reshape(4, 16), FLOW_1_2.T)
    np.testing.assert_array_equal(f.grad_source, CONV1)
    assert f.info.weighting == "unknown" and f.value_source is None


def test_a_missing_flow_keeps_the_gradients(tmp_path):
    info = flow_info()
    info["gradient_flows"][("conv2", "conv3")] = None
    pkl = tmp_path / "flow_info.pkl"
    pkl.write_bytes(pickle.dumps(info))
    ids = import_flow_info(pkl, tmp_path, "t")
    f = open_group(tmp_path).read_flow("t", ids[0])
    assert f.info.status == "missing" and f.flow is None
    assert f.grad_target.shape == (1, 1)


class RunsCode:
    """What a malicious flow_info.pkl holds: unpickling calls os.system."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    info = flow_info()
    info["activation_gradients"]["conv1"] = RunsCode(f"touch {marker}")
    data = pickle.dumps(info)
    # the file really is dangerous: plain pickle would run the command
    probe = tmp_path / "probe_marker"
    pickle.loads(pickle.dumps(RunsCode(f"touch {probe}")))
    assert probe.exists()

    pkl = tmp_path / "flow_info.pkl"
    pkl.write_bytes(data)
    os.mkdir(tmp_path / "group")
    with pytest.raises(UnsafePickleError) as e:
        import_flow_info(pkl, tmp_path / "group", "t")
    name = "posix.system" if sys.platform != "win32" else "nt.system"
    assert f"refused global {name}" in str(e.value) and str(pkl) in str(e.value)
    assert not marker.exists()
    assert not (tmp_path / "group" / "trials").exists()  # nothing was imported


@pytest.mark.parametrize("payload,refused", [
    # builtins that run code or reach attributes, named directly in the stream
    (b"cbuiltins\neval\n(S'1+1'\ntR.", "builtins.eval"),
    (b"cbuiltins\ngetattr\n(cbuiltins\nobject\nS'x'\ntR.", "builtins.getattr"),
    (b"csubprocess\nPopen\n((S'true'\nltR.", "subprocess.Popen"),
    (b"cnumpy\nload\n(S'x'\ntR.", "numpy.load"),
])
def test_other_globals_are_refused(payload, refused):
    with pytest.raises(UnsafePickleError, match=f"refused global {refused}"):
        safe_load(payload)


def test_object_arrays_persistent_ids_and_damage(tmp_path):
    with pytest.raises(UnsafePickleError, match="dtype object"):
        safe_load(pickle.dumps({"a": np.array([1, "x"], dtype=object)}))
    with pytest.raises(UnsafePickleError, match="persistent id"):
        safe_load(b"P1\n.")
    with pytest.raises(StorageError, match="not a readable pickle"):
        safe_load(b"\x80\x04garbage")
    pkl = tmp_path / "flow_info.pkl"
    pkl.write_bytes(pickle.dumps({"something": 1}))
    with pytest.raises(StorageError, match="not a vnittest flow_info file"):
        read_flow_info(pkl)
    # plain values pass
    assert safe_load(pickle.dumps({("a", "b"): [1, 2.5, "s", b"x", {3}, np.float32(1)]}))
