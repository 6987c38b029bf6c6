"""The tensors of a module call: its arguments' and its output's tensors with their
roles (``input 0``, ``output logits``), searched through tuples, lists, dicts,
dataclasses and named tuples; the batch size a call's arguments show (``watch()``'s
hooks, ``record/hooks.py``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .module_graph import tensor_key

MAX_DEPTH = 4  # nesting of tuples, dicts and dataclasses searched for tensors


def tensors_in(obj: Any, role: str, out: list, depth: int = 0) -> None:
    """The float tensors inside ``obj`` with their roles (``output 0``, ``output 0.1``,
    ``output logits``): tensors, tuples, lists, dicts, dataclasses."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            out.append((role, obj))
        return
    if depth >= MAX_DEPTH or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    sep = " " if depth == 0 else "."
    if isinstance(obj, dict):
        for k, v in obj.items():
            tensors_in(v, f"{role}{sep}{k}", out, depth + 1)
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            tensors_in(v, f"{role}{sep}{i}", out, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            tensors_in(getattr(obj, f.name, None), f"{role}{sep}{f.name}", out, depth + 1)


def inputs_of(args: tuple, kwargs: dict) -> list:
    found: list = []
    for i, a in enumerate(args):
        tensors_in(a, f"input {i}", found, 1)
    for k, v in kwargs.items():
        tensors_in(v, f"input {k}", found, 1)
    return found


def outputs_of(output: Any) -> list:
    found: list = []
    if isinstance(output, torch.Tensor):
        tensors_in(output, "output 0", found, 1)
    elif isinstance(output, (tuple, list)) and not hasattr(output, "_fields"):
        for i, v in enumerate(output):
            tensors_in(v, f"output {i}", found, 1)
    elif isinstance(output, dict):
        for k, v in output.items():
            tensors_in(v, f"output {k}", found, 1)
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        for f in dataclasses.fields(output):
            tensors_in(getattr(output, f.name, None), f"output {f.name}", found, 1)
    elif hasattr(output, "_fields"):  # a named tuple
        for f in output._fields:
            tensors_in(getattr(output, f), f"output {f}", found, 1)
    return found


def tensor_version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter (and cannot change)
        return -1


def batch_size_of(args: tuple, kwargs: dict) -> int:
    """The size of the first dimension of the first tensor argument (1 if none)."""
    for _role, t in inputs_of(args, kwargs):
        if t.dim():
            return max(int(t.shape[0]), 1)
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and a.dim():
            return max(int(a.shape[0]), 1)
    return 1


def all_tensors(args: tuple, kwargs: dict) -> list:
    """Every tensor among a call's arguments, of any dtype (token ids tell that a call
    was given the step's input as well as float tensors do)."""
    found: list = []
    todo = [(a, 0) for a in list(args) + list(kwargs.values())]
    while todo:
        obj, depth = todo.pop()
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif depth < MAX_DEPTH and isinstance(obj, (tuple, list)):
            todo.extend((x, depth + 1) for x in obj)
        elif depth < MAX_DEPTH and isinstance(obj, dict):
            todo.extend((x, depth + 1) for x in obj.values())
    return found


class BatchTracker:
    """Which tensors of one forward have a batch dimension (dimension 0, of the step's
    batch size): those that derive from the step's input. An output of a call that was
    given the input (``given``: a tensor argument from it) derives from it, an output of
    one that was not does not (a parameter, or a tensor made from parameters alone,
    never does); a tensor made between module calls goes with the call it was made in
    (``enclosing``; the root's arguments are the step's input)."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.given: set[str] = set()  # invocations given the step's input
        self.keys: set = set()  # outputs that derive from it
        self.other_keys: set = set()  # outputs of invocations that were not given it

    def enclosing(self, parent_id: str | None) -> bool:
        return parent_id is None or parent_id in self.given

    def leading(self, t: torch.Tensor) -> bool:
        return (t.dim() > 0 and int(t.shape[0]) == self.batch_size
                and not isinstance(t, torch.nn.Parameter))

    def from_input(self, t: torch.Tensor, enclosing: bool, key: object = None) -> bool:
        if not self.leading(t):
            return False
        key = tensor_key(t) if key is None else key
        if key in self.keys:
            return True
        if key in self.other_keys:
            return False
        return enclosing

    def enter(self, inv_id: str, enclosing: bool, arguments: list) -> None:
        if any(self.from_input(t, enclosing) for t in arguments):
            self.given.add(inv_id)

    def output(self, given: bool, t: torch.Tensor, key: object) -> bool:
        derived = given and self.leading(t)
        (self.keys if derived else self.other_keys).add(key)
        return derived
