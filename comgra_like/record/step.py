"""The training step being recorded: its registrations, their lookups, hand-made
connections and what its gradients have been.

One ``Step`` per recorded (or not yet decided) training step. ``ComgraRecorder`` (the
comgra-compatible facade) feeds it from the user's calls; other drivers (module hooks)
feed it through the same public methods: ``register`` books a tensor, ``connect`` adds
an edge autograd does not have, ``gradients`` says which ``.grad`` to record.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import get_gradient_edge

from ..errors import CallOrderError, GraphError, RegistrationError
from ..vocabulary import (
    CALCULATED,
    INPUT,
    LOSS,
    PARAMETER,
    STORAGE_OPTIONS,
    STORE_STATISTICS,
    TARGET,
)

MAX_SIGNATURE_IDS = 4096  # signatures kept as ids before the table starts over

# Where a hand-made connection starts: a registration id, or (autograd node, output_nr) of
# a tensor that is not registered (see Step.source)
Source = int | tuple[object, int]


@dataclass(eq=False)
class Registration:
    rid: int
    tensor_name: str
    node: str
    role: str
    kind: str
    iteration: int  # -1: belongs to the whole step (parameters, initial values)
    batch_dim: int | None
    per_sample: bool
    with_values: bool
    tensor: torch.Tensor
    alias_of: int | None = None
    param_index: int = -1
    # A small int for everything about it that the graph structure and the capture
    # layout show (name, node, role, kind, shape, flags, dtype): see SignatureTable
    sig_id: int = -1
    grad_fn: object = None  # the tensor's when registered (an in-place change replaces it)
    # The values to record when they are not the tensor's at the end of the step: a copy
    # taken at registration (watch(): a module's output that a later in-place operation
    # changes, like ReLU(inplace=True) or `out += identity`)
    values: torch.Tensor | None = None


@dataclass(eq=False)
class Parameter:
    """A tracked module's parameter: recorded on every recorded step."""

    full_name: str
    tensor: torch.nn.Parameter
    node: str
    role: str
    module_group: str | None


class SignatureTable:
    """Registration signatures as small ints, for the cache keys of every recorded step
    (a key of ints hashes in a fraction of the time of one of nested tuples).

    Ids are never reused, so a key made before the table was emptied cannot match a
    different signature afterwards.
    """

    def __init__(self, limit: int | None = None):
        self.limit = MAX_SIGNATURE_IDS if limit is None else limit
        self._ids: dict[tuple, int] = {}
        self._counter = itertools.count()

    def id_of(self, signature: tuple) -> int:
        ids = self._ids
        sig_id = ids.get(signature)
        if sig_id is None:
            if len(ids) >= self.limit:  # names or shapes that change every step
                ids.clear()
            sig_id = ids[signature] = next(self._counter)
        return sig_id


@dataclass(slots=True)  # made on every registration: slots are ~4x faster than frozen
class RegistrationArgs:
    """What ``register_tensor``'s arguments mean, once checked."""

    kind: str
    iteration: int
    batch_dim: int | None
    per_sample: bool
    with_values: bool
    node: str
    role: str


def check_registration(tensor_name, tensor, *, index_of_batch_dimension, is_input, is_parameter,
                       is_target, is_loss, storage, record_per_batch_index, node_name,
                       role_within_node, is_initial_value, stage: str, iteration: int | None,
                       batch_size: int, record_by_default: bool) -> RegistrationArgs:
    """Check the arguments of ``register_tensor`` (``storage``: comgra's
    ``recording_type`` option) at a point of the loop (``stage``: ``batch`` or
    ``iteration``, ``iteration``: the current one); raises a ComgraError naming the
    tensor and the fix."""
    if not isinstance(tensor, torch.Tensor):
        raise RegistrationError(
            f"register_tensor({tensor_name!r}, ...) needs a torch.Tensor, got "
            f"{type(tensor).__name__}"
        )
    if not isinstance(tensor_name, str) or not tensor_name:
        raise RegistrationError(f"tensor_name must be a non-empty string, got {tensor_name!r}")
    if sum(map(bool, (is_input, is_parameter, is_target, is_loss))) > 1:
        raise RegistrationError(
            f"{tensor_name!r}: at most one of is_input, is_parameter, is_target and is_loss "
            "may be True"
        )
    if is_initial_value:
        if stage != "batch" or iteration is not None:
            raise CallOrderError(
                f"{tensor_name!r}: is_initial_value=True registers a state before the first "
                "iteration: call it after start_batch() and before start_iteration()"
            )
        iteration = -1
    elif is_parameter:
        iteration = -1
    elif stage != "iteration":
        raise CallOrderError(
            f"register_tensor({tensor_name!r}) must be called between start_iteration() "
            "and finish_iteration() (or pass is_initial_value=True before the first "
            "iteration)"
        )
    if storage is not None and storage not in STORAGE_OPTIONS:
        raise RegistrationError(
            f"{tensor_name!r}: recording_type must be 'neuron', 'kpis' or None, got "
            f"{storage!r}"
        )
    if tensor.is_meta:
        raise RegistrationError(
            f"{tensor_name!r} is on the meta device and has no values to record; register "
            "a tensor with data (e.g. after model.to_empty(device='cpu') and initialising it)"
        )
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise RegistrationError(
            f"{tensor_name!r} has dtype {tensor.dtype}, which cannot require a gradient. "
            "Register a float copy instead (tensor.float()) and connect it with "
            "add_tensor_connection()"
        )
    if is_loss:
        if tensor.numel() != 1:
            raise RegistrationError(
                f"loss {tensor_name!r} must be a scalar (0-dim) tensor, got shape "
                f"{tuple(tensor.shape)}; reduce it (e.g. .mean()) or register it without "
                "is_loss=True"
            )
        batch_dim = None
    elif is_parameter:
        batch_dim = None
    else:
        batch_dim = index_of_batch_dimension
    if batch_dim is not None:
        if not isinstance(batch_dim, int) or not (0 <= batch_dim < tensor.dim()):
            raise RegistrationError(
                f"{tensor_name!r} has shape {tuple(tensor.shape)} and no dimension "
                f"{batch_dim}; pass index_of_batch_dimension=None for a tensor without a "
                "batch dimension"
            )
        if tensor.shape[batch_dim] != batch_size:
            raise RegistrationError(
                f"{tensor_name!r} has size {tensor.shape[batch_dim]} in its batch dimension "
                f"{batch_dim} (shape {tuple(tensor.shape)}), but start_batch() declared a "
                f"batch size of {batch_size}"
            )
    per_sample = record_by_default if record_per_batch_index is None else bool(
        record_per_batch_index)
    if batch_dim is None:
        if record_per_batch_index:
            raise RegistrationError(
                f"{tensor_name!r} has no batch dimension, so record_per_batch_index=True is "
                "impossible"
            )
        per_sample = False
    kind = (INPUT if is_input else PARAMETER if is_parameter else TARGET if is_target
            else LOSS if is_loss else CALCULATED)
    return RegistrationArgs(
        kind, iteration, batch_dim, per_sample, storage != STORE_STATISTICS and not is_parameter,
        node_name if node_name is not None else tensor_name,
        role_within_node if role_within_node is not None else tensor_name,
    )


@dataclass(eq=False)
class Step:
    """Everything one recorded (or undecided) step accumulates; dropped at its end."""

    signatures: SignatureTable
    training_step: int = -1
    regs: list[Registration] = field(default_factory=list)
    by_iteration: dict[int, list[Registration]] = field(default_factory=dict)
    by_name: dict[tuple[str, int], Registration] = field(default_factory=dict)
    by_node_role: dict[tuple[str, str, int], Registration] = field(default_factory=dict)
    owner_fn: dict[tuple[object, int], int] = field(default_factory=dict)
    owner_leaf: dict[int, int] = field(default_factory=dict)
    by_tensor: dict[int, Registration] = field(default_factory=dict)
    # Hand-made connections by sink: an unregistered tensor's grad_fn, an unregistered
    # leaf's id, a registration id
    conn_fn: dict[object, set[Source]] = field(default_factory=dict)
    conn_leaf: dict[int, set[Source]] = field(default_factory=dict)
    conn_reg: dict[int, set[Source]] = field(default_factory=dict)
    keep_alive: list[torch.Tensor] = field(default_factory=list)
    slot: object = None  # the transport's shared memory the captures are copied into
    plans: list = field(default_factory=list)  # the captures, in order (capture.py)
    gradient_groups: set[str] = field(default_factory=set)
    # rid -> (the .grad tensor, its _version) when last seen: a gradient that is still the
    # same is not new (record_current_gradients before backward() would store old ones)
    grad_marks: dict[int, tuple] = field(default_factory=dict)
    # Leaves that register() made require a gradient (rid -> name), and the rids the
    # iterations' graphs found a dependency on: see unused_leaves()
    made_grad: dict[int, str] = field(default_factory=dict)
    depended_on: set[int] = field(default_factory=set)
    graphs: dict[int, str] = field(default_factory=dict)  # iteration -> graph hash
    pending_kpis: list[tuple] = field(default_factory=list)
    walker: object = None  # the graph.DependencyWalker over this step's lookups

    # ----- the parameters come first ------------------------------------------------------

    @classmethod
    def of_parameters(cls, params: list[Parameter], signatures: SignatureTable) -> Step:
        """A step holding the registrations of ``params``, in order (a template: see copy)."""
        step = cls(signatures)
        for i, p in enumerate(params):
            step.book(p.full_name, p.tensor, p.node, p.role, PARAMETER, -1, None, False, False,
                      None, i, p.tensor.grad_fn)
        return step

    def copy(self, training_step: int) -> Step:
        """A new step with this one's registrations (the parameters' template)."""
        step = Step(
            self.signatures, training_step, regs=list(self.regs), by_name=dict(self.by_name),
            by_node_role=dict(self.by_node_role), by_tensor=dict(self.by_tensor),
            owner_leaf=dict(self.owner_leaf), owner_fn=dict(self.owner_fn),
        )
        if self.regs:
            step.by_iteration[-1] = list(self.regs)
        return step

    # ----- registrations ------------------------------------------------------------------

    def register(self, tensor_name: str, tensor: torch.Tensor, args: RegistrationArgs) -> Registration:
        """Book a checked registration and make ``tensor`` carry its gradient.

        The same tensor object registered again becomes an alias (no new data). A leaf
        that does not require a gradient is made to require one, so that what is
        computed from it afterwards is connected to it.
        """
        alias = self.by_tensor.get(id(tensor))
        if alias is not None and alias.tensor is not tensor:
            alias = None
        # Booked first (it refuses duplicates), so that a refused registration leaves the
        # tensor as it was. Making a leaf require a gradient leaves its grad_fn None.
        grad_fn = tensor.grad_fn
        reg = self.book(tensor_name, tensor, args.node, args.role, args.kind, args.iteration,
                        args.batch_dim, args.per_sample, args.with_values,
                        alias.rid if alias is not None else None, -1, grad_fn)
        if grad_fn is not None:
            tensor.retain_grad()
        elif not tensor.requires_grad and not tensor.is_inference():
            # (A tensor made under torch.inference_mode(), e.g. in a validation loop, can
            # never require a gradient: it is recorded with its values, without edges.)
            tensor.requires_grad_(True)
            if args.kind != PARAMETER and alias is None:
                self.made_grad[reg.rid] = tensor_name
        return reg

    def book(self, tensor_name, tensor, node, role, kind, iteration, batch_dim, per_sample,
             with_values, alias_of, param_index, grad_fn) -> Registration:
        """Add a registration to the lookups (``grad_fn``: the tensor's, read once)."""
        if (tensor_name, iteration) in self.by_name:
            raise RegistrationError(
                f"a tensor named {tensor_name!r} is registered already in iteration {iteration} "
                f"of step {self.training_step}; give each tensor a unique name per iteration"
            )
        if (node, role, iteration) in self.by_node_role:
            raise RegistrationError(
                f"node {node!r} already has a tensor with role {role!r} in iteration {iteration} "
                f"of step {self.training_step} (while registering {tensor_name!r}); pass a "
                "different role_within_node"
            )
        reg = Registration(len(self.regs), tensor_name, node, role, kind, iteration, batch_dim,
                           per_sample, with_values, tensor, alias_of, param_index,
                           grad_fn=grad_fn)
        shape = list(tensor.shape)
        if batch_dim is not None:
            shape[batch_dim] = -1
        reg.sig_id = self.signatures.id_of(
            (tensor_name, node, role, kind, iteration, tuple(shape), alias_of, param_index,
             per_sample, with_values, batch_dim, tensor.dtype))
        self.regs.append(reg)
        self.by_iteration.setdefault(iteration, []).append(reg)
        self.by_name[(tensor_name, iteration)] = reg
        self.by_node_role[(node, role, iteration)] = reg
        if alias_of is None:
            self.by_tensor[id(tensor)] = reg
            if grad_fn is not None:
                self.owner_fn.setdefault((grad_fn, tensor.output_nr), reg.rid)
            else:
                self.owner_leaf.setdefault(id(tensor), reg.rid)
        return reg

    # ----- connections --------------------------------------------------------------------

    def resolve(self, name, what: str) -> Registration:
        """The registration a tensor name stands for (the latest iteration's), or the one
        a comgra-style TensorReference (``tensor_name`` and ``iteration``) names."""
        if _is_reference(name):
            ref = name.get_canonical_reference() if hasattr(
                name, "get_canonical_reference") else name
            reg = self.by_name.get((ref.tensor_name, ref.iteration))
            if reg is None:
                raise RegistrationError(
                    f"{what}: the reference to {ref.tensor_name!r} in iteration "
                    f"{ref.iteration} names no tensor registered in this batch; register it "
                    "before connecting it"
                )
            return reg
        if not isinstance(name, str):
            raise RegistrationError(
                f"{what}: expected a tensor, a tensor name or a TensorReference, got "
                f"{type(name).__name__}")
        candidates = [r for (n, _), r in self.by_name.items() if n == name]
        if not candidates:
            raise RegistrationError(
                f"{what}: no tensor named {name!r} is registered in this batch; register it "
                "before connecting it"
            )
        return max(candidates, key=lambda r: r.iteration)

    def source(self, src, what: str) -> Source:
        """What a connection starts from: a registration id, or, for a tensor that is not
        registered, its place in the autograd graph (the graph walk goes on from there to
        the registered tensors it was computed from, as comgra does)."""
        if not isinstance(src, torch.Tensor):
            return self.resolve(src, what).rid
        reg = self.by_tensor.get(id(src))
        if reg is not None and reg.tensor is src:
            return reg.rid
        if not src.requires_grad:
            raise RegistrationError(
                f"{what}: the source tensor (shape {tuple(src.shape)}, {src.dtype}) is not "
                "registered and does not require a gradient, so nothing links it to the "
                "registered tensors. Register it with register_tensor() right after creating "
                "it, or compute it from registered tensors with gradients enabled (not under "
                "torch.no_grad())"
            )
        if src.grad_fn is None and id(src) not in self.conn_leaf:
            raise RegistrationError(
                f"{what}: the source tensor (shape {tuple(src.shape)}, {src.dtype}) is a leaf "
                "that is not registered, so nothing links it to the registered tensors. "
                "Register it with register_tensor() (track_module() for a parameter)"
            )
        # Holding the autograd node keeps it (and a leaf's gradient accumulator) alive
        # until the step ends, like the other lookups of the step.
        edge = get_gradient_edge(src)
        return (edge.node, edge.output_nr)

    def connect(self, src, sink, what: str = "add_tensor_connection") -> None:
        """An edge from ``src`` to ``sink`` where autograd has none.

        Either side may be a registered tensor, its name, or a tensor that is not
        registered; an unregistered source stands for the registered tensors it was
        computed from. A connection of a tensor to itself is refused here; longer loops
        when the iteration's graph is built.
        """
        source = self.source(src, what)
        if isinstance(sink, str) or _is_reference(sink):
            target = self.resolve(sink, what)
            self._refuse_self(source, target, src, what)
            self.conn_reg.setdefault(target.rid, set()).add(source)
            return
        if not isinstance(sink, torch.Tensor):
            raise RegistrationError(
                f"{what}: sink must be a tensor, a registered tensor's name or a "
                "TensorReference")
        target = self.by_tensor.get(id(sink))
        if target is not None and target.tensor is sink:
            self._refuse_self(source, target, src, what)
            self.conn_reg.setdefault(target.rid, set()).add(source)
            return
        if sink is src:
            raise GraphError(
                f"{what}: the source and the sink are the same tensor (shape "
                f"{tuple(sink.shape)}); a tensor cannot depend on itself. Remove this call")
        if sink.grad_fn is not None:
            self.conn_fn.setdefault(sink.grad_fn, set()).add(source)
            self.keep_alive.append(sink)
        else:
            if not sink.requires_grad and (sink.is_floating_point() or sink.is_complex()):
                sink.requires_grad_(True)
            self.conn_leaf.setdefault(id(sink), set()).add(source)
            self.keep_alive.append(sink)

    def _refuse_self(self, source: Source, target: Registration, src, what: str) -> None:
        if source == target.rid or (isinstance(src, torch.Tensor) and src is target.tensor):
            raise GraphError(
                f"{what}: {target.tensor_name!r} would be connected to itself; a tensor "
                "cannot depend on itself. Remove this call"
            )

    # ----- gradients ----------------------------------------------------------------------

    def mark_parameter_gradients(self, params: list[Parameter]) -> None:
        """Remember the parameters' gradients as they are when the step starts."""
        marks = self.grad_marks
        for reg, p in zip(self.regs, params):
            grad = p.tensor.grad
            if grad is not None:
                marks[reg.rid] = (grad, grad._version)

    def gradients(self, loss_group: str) -> tuple[list[Registration], list[torch.Tensor]]:
        """The registrations that have a gradient now, and those gradients.

        Raises CallOrderError when none of them changed since the step started or the
        last loss group (the call came before ``backward()``: these are old gradients).
        """
        regs, grads = [], []
        marks = self.grad_marks
        fresh = False
        for reg in self.regs:
            if reg.alias_of is not None:
                continue
            grad = reg.tensor.grad
            if grad is not None:
                regs.append(reg)
                grads.append(grad)
                if not fresh:
                    mark = marks.get(reg.rid)
                    fresh = mark is None or mark[0] is not grad or mark[1] != grad._version
        if regs and not fresh:
            raise CallOrderError(
                f"record_current_gradients({loss_group!r}) in step {self.training_step}: no "
                "gradient changed since start_batch() or the last record_current_gradients(), "
                "so these are old gradients. Call it after loss.backward()"
            )
        for reg, grad in zip(regs, grads):
            marks[reg.rid] = (grad, grad._version)
        return regs, grads

    def unused_leaves(self) -> list[str]:
        """Names of leaves that ``register`` made require a gradient and that no graph of
        this step depends on: probably used before they were registered (edges lost)."""
        # A leaf that hand-made connections lead into (a detached copy) is meant to be one.
        return [name for rid, name in self.made_grad.items()
                if rid not in self.depended_on and rid not in self.conn_reg
                and id(self.regs[rid].tensor) not in self.conn_leaf]


def _is_reference(obj) -> bool:
    """A TensorReference, ours or comgra's (the same two fields name a registration)."""
    return (not isinstance(obj, (str, torch.Tensor)) and hasattr(obj, "tensor_name")
            and isinstance(getattr(obj, "iteration", None), int))
