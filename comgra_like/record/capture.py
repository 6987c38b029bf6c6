"""Copies of a recorded step's tensors into the transport's shared memory, and the
step's message to the writer.

Steps of a training loop capture the same tensors in the same order, so where each one
goes, the views that write it there and its description for the writer are planned once
per slot and reused: per step only the copies remain.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch

from ..protocol import CaptureSpec, graphs_part, layout_part, samples_part, step_body
from .step import Registration, Step


@dataclass(eq=False)
class CapturePlan:
    """Where the tensors of one capture call go in a slot (see ``Capturer.capture``)."""

    order: list[int]  # tensor index per view (sorted by size)
    views: list[torch.Tensor]
    refs: list[int]  # segment, offset per view
    layout: list[CaptureSpec]  # the writer's description per view
    fill: list[int]  # the slot's fill after this call
    needed: int
    complex: bool
    pid: int  # unique per plan, never reused (a key that keeps no memory alive)


class Capturer:
    """Copies tensors into a step's slot and composes the step's message.

    ``writer``: the transport's client (``allocate``, ``layout_id``,
    ``layout_generation``).
    """

    def __init__(self, writer):
        self._writer = writer
        self._plan_ids = itertools.count()
        self._msg_parts: dict[tuple, tuple[int, str]] = {}
        self._json_parts: dict[tuple, str] = {}
        self.plans_made = 0  # captures planned afresh (a counter; the rest reuse a plan)
        self.captures = 0

    def capture(self, step: Step, batch_size: int, regs: list[Registration],
                tensors: list[torch.Tensor], recording_types: str | list[str]) -> None:
        """Copy tensors (as float32) into the batch's shared memory for the writer.

        Steps of a training loop capture the same tensors in the same order, so where each
        one goes, the views that write it there and its description for the writer are
        planned once per slot and reused: per step only the copies remain. Tensors of one
        size go next to each other, so that the writer reduces them as one block.
        """
        if not regs:
            return
        slot = step.slot
        single = isinstance(recording_types, str)
        key = (recording_types if single else tuple(recording_types), tuple(slot.fill),
               batch_size, tuple([r.sig_id for r in regs]))
        plan = slot.plans.get(key)
        self.captures += 1
        if plan is None:
            self.plans_made += 1
            plan = self._plan(slot, regs, tensors, [recording_types] * len(regs)
                                      if single else recording_types)
            if len(slot.plans) >= 64:  # tensors that change every step: plan afresh
                slot.plans.clear()
            slot.plans[key] = plan
        else:
            slot.fill[:] = plan.fill
            slot.needed = plan.needed
        sources = [tensors[i] for i in plan.order]
        enabled = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        try:
            if plan.complex:
                for view, t in zip(plan.views, sources):
                    view.copy_(t.abs() if t.is_complex() else t)
            else:
                torch._foreach_copy_(plan.views, sources)  # one call instead of one per tensor
        finally:
            torch.set_grad_enabled(enabled)
        step.plans.append(plan)

    def _plan(self, slot, regs, tensors, recording_types) -> CapturePlan:
        order = sorted(range(len(regs)), key=lambda i: tensors[i].numel())
        refs, views, layout = [], [], []
        for i in order:
            t, reg = tensors[i], regs[i]
            n = t.numel()
            seg_index, offset = self._writer.allocate(slot, n)
            seg = slot.segments[seg_index]
            # Views made under torch.inference_mode() (a validation step recorded first)
            # would be inference tensors that no later step outside it may copy into.
            with torch.inference_mode(False):
                if seg.view is None:
                    seg.view = torch.frombuffer(seg.mm, dtype=torch.float32)
                views.append(seg.view[offset:offset + n].view(t.shape))
            refs += (seg_index, offset)
            layout.append(CaptureSpec(reg.tensor_name, reg.node, reg.role, reg.kind,
                                      reg.iteration, recording_types[i], tuple(t.shape),
                                      reg.batch_dim, reg.per_sample, reg.with_values,
                                      reg.param_index))
        return CapturePlan(order, views, refs, layout, list(slot.fill), slot.needed,
                            any(t.is_complex() for t in tensors), next(self._plan_ids))

    def message(self, step: Step, type_of_execution: str, samples: list[int],
                categories: list[str], batch_size: int) -> str:
        """The body of the step's message to the writer (see ``WriterClient.submit_batch``).

        The same plans give the same layout and references, and the type of execution and
        the samples repeat from step to step: their JSON is made once.
        """
        plans = step.plans
        writer = self._writer
        key = tuple([plan.pid for plan in plans])
        cached = self._msg_parts.get(key)
        if cached is None or cached[0] != writer.layout_generation:
            layout = [x for plan in plans for x in plan.layout]
            refs = [x for plan in plans for x in plan.refs]
            layout_id, new = writer.layout_id(tuple(layout))
            if len(self._msg_parts) >= 256:
                self._msg_parts.clear()
            self._msg_parts[key] = (writer.layout_generation, layout_part(layout_id, refs))
            # the writer learns the layout with this message only
            head = layout_part(layout_id, refs, layout if new else None)
        else:
            head = cached[1]
        parts_key = (type_of_execution, tuple(samples), tuple(categories))
        parts = self._json_parts.get(parts_key)
        if parts is None:
            if len(self._json_parts) >= 256:
                self._json_parts.clear()
            parts = self._json_parts[parts_key] = samples_part(type_of_execution, samples,
                                                               categories)
        return step_body(head, step.training_step, parts, batch_size, time.time(),
                         graphs_part(step.graphs))
