"""Group.read_metrics / list_metrics over metrics shards written by the writer's shard
writer (ShardBuffer) into a trial a real recorder made."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from comgra_like.errors import ConfigurationError, NotFoundError
from comgra_like.format.layout import METRICS
from comgra_like.format.schema import METRICS_SCHEMA
from comgra_like.objects import DecisionMakerForRecordingsFrequencyPerType
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder
from comgra_like.writer.shards import ShardBuffer


def _trial(root) -> tuple:
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsFrequencyPerType(1))
    rec.track_module("net", torch.nn.Linear(2, 2))
    rec.finalize()
    return root / "g", root / "g" / "trials" / "t"


def _rows(steps, module, cls, metric, values, vectors=None, backward=None):
    n = len(steps)
    return pa.table({
        "trial_id": ["t"] * n, "training_step": steps, "type_of_execution": ["training"] * n,
        "module": [module] * n, "module_class": [cls] * n, "metric": [metric] * n,
        "backward_pass": backward or [0] * n, "value": values,
        "vector": vectors or [None] * n, "wall_time": [float(s) for s in steps],
    }, schema=pa.schema([(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                         for f in METRICS_SCHEMA])).cast(METRICS_SCHEMA)


def test_read_and_list_metrics_filters_sorts_and_sees_new_shards(tmp_path):
    group_dir, trial = _trial(tmp_path)
    shards = ShardBuffer(trial)
    shards.add({METRICS: _rows([5, 0], "model.fc1", "Linear", "WeightNorm", [2.5, 1.5])})
    shards.add({METRICS: _rows([0, 0], "model.fc1", "Linear", "OutputGradSndNorm", [3.0, 4.0],
                               backward=[1, 0])})
    shards.add({METRICS: _rows([0], "model.fc2", "Linear", "InputCovMaxEig", [9.0],
                               vectors=[[9.0, 2.0, 0.5]])})
    shards.write()

    group = open_group(group_dir)
    frame = group.read_metrics("t")
    assert list(frame.columns) == ["training_step", "type_of_execution", "module",
                                   "module_class", "metric", "backward_pass", "value",
                                   "vector", "wall_time"]
    # sorted by (metric, module, training_step, backward_pass)
    assert list(zip(frame.metric, frame.training_step, frame.backward_pass, frame.value)) == [
        ("InputCovMaxEig", 0, 0, 9.0), ("OutputGradSndNorm", 0, 0, 4.0),
        ("OutputGradSndNorm", 0, 1, 3.0), ("WeightNorm", 0, 0, 1.5), ("WeightNorm", 5, 0, 2.5)]
    vec = frame.vector[0]
    assert isinstance(vec, np.ndarray) and vec.dtype == np.float64
    np.testing.assert_array_equal(vec, [9.0, 2.0, 0.5])
    assert frame.vector[1] is None

    only = group.read_metrics("t", module="model.fc1", metric=["WeightNorm"], steps=5)
    assert list(only.value) == [2.5]
    assert group.read_metrics("t", metric="nothing").empty

    listed = group.list_metrics("t")
    assert listed.to_dict("records") == [
        {"module": "model.fc2", "module_class": "Linear", "metric": "InputCovMaxEig",
         "n_points": 1},
        {"module": "model.fc1", "module_class": "Linear", "metric": "OutputGradSndNorm",
         "n_points": 2},
        {"module": "model.fc1", "module_class": "Linear", "metric": "WeightNorm",
         "n_points": 2}]

    # a new shard is seen after refresh(), not before (one snapshot between refreshes)
    version = group.version
    shards.add({METRICS: _rows([10], "model.fc1", "Linear", "WeightNorm", [3.5])})
    shards.write()
    assert len(group.read_metrics("t", metric="WeightNorm")) == 2
    group.refresh()
    assert group.version > version
    assert list(group.read_metrics("t", metric="WeightNorm").training_step) == [0, 5, 10]


def test_read_metrics_of_a_trial_without_metrics_and_of_no_trial(tmp_path):
    group_dir, _trial_dir = _trial(tmp_path)
    group = open_group(group_dir)
    assert group.read_metrics("t").empty
    assert list(group.list_metrics("t").columns) == ["module", "module_class", "metric",
                                                     "n_points"]
    with pytest.raises(NotFoundError):
        group.read_metrics("nope")
    with pytest.raises(ConfigurationError, match="list of values"):
        group.read_metrics("t", module=3.5)
