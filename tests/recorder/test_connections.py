"""Hand-made connections (add_tensor_connection, detach_while_keeping_connection): the
dependency graphs they give, as edge lists drawn by hand, and the loops they must not make.

comgra 0.11.5 accepts a connection from (or to) a tensor that is not registered: the
dependency walk goes on through that tensor's autograd graph to the registered tensors
behind it. Loops are refused with a GraphError naming the tensors. Every refused loop runs
in a child process with a time limit, so a walk that never ends fails its test instead of
freezing the run; the child then records a good step, which must read back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from comgra_like.errors import ComgraError, GraphError, RegistrationError
from comgra_like.objects import DecisionMakerForRecordingsHardcoded, TensorReference
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

B = 4
RECORDED = [0, 2]  # of the steps 0..2 of every training loop here
# x -> net -> output -> loss: what every case has besides its own connections
BASE = {
    ("x", "output"), ("net.weight", "output"), ("net.bias", "output"), ("output", "loss"),
}
CHILD_TIMEOUT = 120  # seconds; a loop that is found takes well under 10


def train(root: Path, body, trial_id: str = "t", steps: int = 3) -> ComgraRecorder:
    """A small real training loop; ``body(rec, x, output)`` runs in every step's
    iteration after ``x`` and ``output`` are registered, before the loss."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rec = ComgraRecorder(root, "g", trial_id, DecisionMakerForRecordingsHardcoded(RECORDED))
    rec.track_module("net", net)
    for step in range(steps):
        rec.start_batch(step, B)
        rec.start_iteration()
        x = torch.randn(B, 3)
        rec.register_tensor("x", x, is_input=True)
        output = net(x)
        rec.register_tensor("output", output)
        body(rec, x, output)
        loss = output.pow(2).mean()
        rec.register_tensor("loss", loss, is_loss=True)
        opt.zero_grad()
        loss.backward()
        rec.record_current_gradients("main")
        opt.step()
        rec.finish_iteration()
        rec.finish_batch()
    return rec


def edges_of(root: Path, trial_id: str = "t", step: int = 0, iteration: int = 0) -> set:
    graph = open_group(root / "g").read_graph(trial_id, step, iteration)
    return {(e.source, e.target) for e in graph.edges}


def recorded_edges(root: Path, body) -> set:
    """The edges of the graph ``body`` gives, the same in every recorded step."""
    train(root, body).finalize()
    graphs = [edges_of(root, step=s) for s in RECORDED]
    assert graphs[0] == graphs[1]
    return graphs[0]


# ----- accepted: connections through tensors that are not registered ---------------------


def _issue_example(rec, x, output):
    tmp = output + 1
    d = tmp.detach()
    rec.register_tensor("d", d)
    rec.add_tensor_connection(tmp, d)


def _unregistered_source_sink_by_name(rec, x, output):
    tmp = output + 1
    rec.register_tensor("d", tmp.detach())
    rec.add_tensor_connection(tmp, "d")


def _both_sides_unregistered(rec, x, output):
    tmp = output * 3
    u = tmp.detach()
    rec.add_tensor_connection(tmp, u)
    rec.register_tensor("e", u.sin())


def _detach_unregistered(rec, x, output):
    d = rec.detach_while_keeping_connection(output * 3) * 2
    rec.register_tensor("d", d)


def _chain_of_detaches(rec, x, output):
    a = rec.detach_while_keeping_connection(output * 2)
    b = rec.detach_while_keeping_connection(a + 1)
    rec.register_tensor("c", b * 5)


def _source_with_two_registered_ancestors(rec, x, output):
    other = torch.randn(B, 2)
    rec.register_tensor("other", other, is_input=True)
    tmp = output * other
    d = tmp.detach()
    rec.register_tensor("d", d)
    rec.add_tensor_connection(tmp, d)


def _source_registered_after_the_connection(rec, x, output):
    tmp = output * 2
    d = tmp.detach()
    rec.register_tensor("d", d)
    rec.add_tensor_connection(tmp, d)
    rec.register_tensor("tmp", tmp)


def _changed_in_place_after_registering(rec, x, output):
    # Not a connection: the tensor's new grad_fn leads back to its own old one, which is
    # no loop; it keeps the edges of what it was computed from.
    hidden = output * 2
    rec.register_tensor("hidden", hidden)
    hidden.relu_()
    rec.register_tensor("after", hidden + 1)


def _tensor_references(rec, x, output):
    # comgra's TensorReference names a registered tensor by name and iteration; one that
    # is not canonical stands for the tensor its previous_reference chain ends at.
    hidden = (output * 2).detach()
    rec.register_tensor("hidden", hidden)
    canonical = TensorReference("output", rec.iteration, "output", "output")
    shown_again = TensorReference("output_again", rec.iteration + 1, "output", "output",
                                  is_canonical_reference=False, previous_reference=canonical)
    rec.add_tensor_connection(shown_again, TensorReference("hidden", rec.iteration))


ACCEPTED = {
    "tensor_references": (_tensor_references, {("output", "hidden")}),
    "issue_example": (_issue_example, {("output", "d")}),
    "unregistered_source_sink_by_name": (_unregistered_source_sink_by_name, {("output", "d")}),
    "both_sides_unregistered": (_both_sides_unregistered, {("output", "e")}),
    "detach_unregistered": (_detach_unregistered, {("output", "d")}),
    "chain_of_detaches": (_chain_of_detaches, {("output", "c")}),
    "source_with_two_registered_ancestors": (
        _source_with_two_registered_ancestors, {("output", "d"), ("other", "d")}),
    "source_registered_after_the_connection": (
        _source_registered_after_the_connection, {("output", "tmp"), ("tmp", "d")}),
    "changed_in_place_after_registering": (
        _changed_in_place_after_registering, {("output", "hidden"), ("hidden", "after")}),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_accepted_connection_edges(case, tmp_path):
    body, own_edges = ACCEPTED[case]
    assert recorded_edges(tmp_path, body) == BASE | own_edges


def test_unregistered_source_from_an_earlier_iteration(tmp_path):
    """A recurrent step: a connection in iteration 1 from an unregistered tensor computed
    from iteration 0's output shows as an edge from the import node ``output@0``."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 3)
    rec = ComgraRecorder(tmp_path, "g", "t", DecisionMakerForRecordingsHardcoded([0]))
    rec.track_module("net", net)
    rec.start_batch(0, B)
    state = torch.randn(B, 3)
    rec.register_tensor("start", state, is_initial_value=True)
    for _ in range(2):
        rec.start_iteration()
        previous = state
        state = net(state)
        rec.register_tensor("output", state)
        if rec.iteration == 1:
            tmp = previous * 2 + 1
            d = tmp.detach()
            rec.register_tensor("d", d)
            rec.add_tensor_connection(tmp, d)
        rec.finish_iteration()
    state.pow(2).mean().backward()
    rec.finish_batch()
    rec.finalize()
    params = {("net.weight", "output"), ("net.bias", "output")}
    assert edges_of(tmp_path, iteration=0) == params | {("start@initial", "output")}
    assert edges_of(tmp_path, iteration=1) == params | {
        ("output@0", "output"), ("output@0", "d")}


# ----- refused at the call: a source nothing links to the registered tensors -------------


def _refusal_at_call(tmp_path, act) -> ComgraError:
    rec = train(tmp_path, lambda rec, x, output: None, steps=1)
    rec.start_batch(RECORDED[1], B)
    rec.start_iteration()
    x = torch.randn(B, 3)
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("d", x * 2)
    with pytest.raises(ComgraError) as info:
        act(rec, x)
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    assert edges_of(tmp_path) == BASE  # the step before reads back
    return info.value


def test_source_without_gradient_is_refused(tmp_path):
    error = _refusal_at_call(tmp_path, lambda rec, x: rec.add_tensor_connection(
        torch.ones(B, 3), "d"))
    assert isinstance(error, RegistrationError)
    assert "shape (4, 3)" in str(error) and "does not require a gradient" in str(error)
    assert "register_tensor()" in str(error)


def test_source_computed_without_gradients_is_refused(tmp_path):
    def act(rec, x):
        with torch.no_grad():
            tmp = x + 1
        rec.add_tensor_connection(tmp, "d")

    error = _refusal_at_call(tmp_path, act)
    assert isinstance(error, RegistrationError) and "torch.no_grad()" in str(error)


def test_unregistered_leaf_source_is_refused(tmp_path):
    error = _refusal_at_call(tmp_path, lambda rec, x: rec.add_tensor_connection(
        torch.randn(B, 3, requires_grad=True), "d"))
    assert isinstance(error, RegistrationError)
    assert "leaf that is not registered" in str(error)


def test_reference_to_no_registered_tensor_is_refused(tmp_path):
    error = _refusal_at_call(tmp_path, lambda rec, x: rec.add_tensor_connection(
        TensorReference("nowhere", 0), "d"))
    assert isinstance(error, RegistrationError)
    assert "'nowhere' in iteration 0" in str(error) and "register it" in str(error)


def test_detach_of_a_tensor_without_gradient_is_refused(tmp_path):
    error = _refusal_at_call(
        tmp_path, lambda rec, x: rec.detach_while_keeping_connection(torch.ones(B, 3)))
    assert isinstance(error, RegistrationError)
    assert "detach_while_keeping_connection" in str(error)


# ----- refused loops: each in a child process with a time limit --------------------------


def _self_by_tensor(rec, x, output):
    rec.add_tensor_connection(output, output)


def _self_by_name(rec, x, output):
    rec.add_tensor_connection("output", output)


def _self_unregistered(rec, x, output):
    tmp = output * 2
    rec.add_tensor_connection(tmp, tmp)


def _immediate(rec, x, output):
    rec.add_tensor_connection(output * 1, output)


def _longer_through_registered(rec, x, output):
    a = output * 2
    rec.register_tensor("a", a)
    b = a * 3
    rec.register_tensor("b", b)
    rec.add_tensor_connection("b", "output")


def _back_to_input(rec, x, output):
    rec.add_tensor_connection(output, x)


def _back_to_input_through_unregistered(rec, x, output):
    rec.add_tensor_connection(output.sum(dim=1, keepdim=True) * 2, x)


def _into_unregistered_from_its_registered_result(rec, x, output):
    tmp = output * 2
    b = tmp * 3
    rec.register_tensor("b", b)
    rec.add_tensor_connection(b, tmp)


def _between_unregistered(rec, x, output):
    tmp = output * 2
    later = tmp.sin()
    rec.add_tensor_connection(later, tmp)
    rec.register_tensor("b", tmp + 1)


# name -> (body, regexes the GraphError's message must match)
REFUSED = {
    "self_by_tensor": (_self_by_tensor, ["'output' would be connected to itself"]),
    "self_by_name": (_self_by_name, ["'output' would be connected to itself"]),
    "self_unregistered": (_self_unregistered, [r"same tensor \(shape \(4, 2\)\)"]),
    "immediate": (_immediate, ["'output' depends on itself"]),
    "longer_through_registered": (_longer_through_registered, [
        "cycle", "output", "'?a'? ->", "b"]),
    "back_to_input": (_back_to_input, ["cycle", "x -> output -> x|output -> x -> output"]),
    "back_to_input_through_unregistered": (_back_to_input_through_unregistered, [
        "cycle", "x -> output -> x|output -> x -> output"]),
    "into_unregistered_from_its_registered_result": (
        _into_unregistered_from_its_registered_result, ["'b' depends on itself"]),
    "between_unregistered": (_between_unregistered, [
        "'b' depends on", "loop", "SinBackward0", "MulBackward0"]),
}


def _child(root: str, case: str) -> None:
    """In a child process: train with ``case``, report its error as JSON, then record a
    good step with the same recorder."""
    body = REFUSED[case][0]
    holder = {}

    def recording(rec, x, output):
        holder["rec"] = rec
        body(rec, x, output)

    result = {}
    try:
        train(Path(root), recording, trial_id="t", steps=1)
    except ComgraError as error:
        result = {"type": type(error).__name__, "message": str(error)}
    rec = holder["rec"]
    # End whatever the error left open, then a good step (step 2 is recorded).
    for end in (rec.finish_iteration, rec.finish_batch):
        try:
            end()
        except ComgraError:
            pass
    rec.start_batch(2, B)
    rec.start_iteration()
    x = torch.randn(B, 3)
    rec.register_tensor("x", x, is_input=True)
    rec.register_tensor("output", x * 2)
    rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    print(json.dumps(result), flush=True)


@pytest.mark.parametrize("case", REFUSED)
def test_refused_loop(case, tmp_path):
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path), case], capture_output=True, text=True,
        timeout=CHILD_TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.get("type") == GraphError.__name__, result
    for pattern in REFUSED[case][1]:
        assert re.search(pattern, result["message"]), (
            pattern, result["message"])
    # The recorder went on: the good step after the refused one reads back.
    assert edges_of(tmp_path, step=2) == {("x", "output")}


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
