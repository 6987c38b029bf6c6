"""A recurrent loop: the dependency graph must have exactly the edges drawn by hand."""

import torch
from torch import nn

from comgra_like.objects import DecisionMakerForRecordingsHardcoded
from comgra_like.query import open_group
from comgra_like.recorder import ComgraRecorder

B, H, STEPS = 4, 6, 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin_in = nn.Linear(2, H)
        self.lin_mem = nn.Linear(H, H)
        self.readout = nn.Linear(H, 1)


def run(root):
    torch.manual_seed(1)
    net = Net()
    rec = ComgraRecorder(root, "g", "t", DecisionMakerForRecordingsHardcoded([0]),
                         prefixes_for_grouping_module_parameters_in_nodes=["net.lin_mem"])
    rec.track_module("net", net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(B, STEPS, 2)
    y = torch.randn(B, 1)
    rec.start_batch(0, B)
    mem = torch.zeros(B, H)
    rec.register_tensor("memory_initial", mem, is_initial_value=True, node_name="memory",
                        role_within_node="initial")
    for it in range(STEPS):
        rec.start_iteration()
        x_t = x[:, it].clone()
        rec.register_tensor("input", x_t, is_input=True)
        positive = (x_t > 0).float()
        rec.register_tensor("positive_count", positive)
        rec.add_tensor_connection("input", positive)
        h = net.lin_in(x_t) + net.lin_mem(mem)
        rec.register_tensor("hidden", h)
        helper = rec.detach_while_keeping_connection(h) * 2
        rec.register_tensor("helper", helper)
        mem = torch.tanh(h)
        rec.register_tensor("new_memory", mem, node_name="memory", role_within_node="state")
        if it == STEPS - 1:
            out = net.readout(mem)
            rec.register_tensor("output", out)
            rec.register_tensor("target", y, is_target=True)
            loss = ((out - y) ** 2).mean()
            rec.register_tensor("loss", loss, is_loss=True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.record_current_gradients("main")
        rec.finish_iteration()
    rec.finish_batch()
    rec.finalize()
    return open_group(root / "g")


def edge_set(graph):
    return {(e.source, e.target, e.source_role, e.target_role) for e in graph.edges}


def common_edges(mem_source, mem_role):
    return {
        (mem_source, "hidden", mem_role, "hidden"),
        ("input", "hidden", "input", "hidden"),
        ("net.lin_in.weight", "hidden", "net.lin_in.weight", "hidden"),
        ("net.lin_in.bias", "hidden", "net.lin_in.bias", "hidden"),
        ("net.lin_mem", "hidden", "net.lin_mem.weight", "hidden"),
        ("net.lin_mem", "hidden", "net.lin_mem.bias", "hidden"),
        ("hidden", "memory", "hidden", "state"),
        ("hidden", "helper", "hidden", "helper"),
        ("input", "positive_count", "input", "positive_count"),
    }


def test_recurrent_graph_edges(tmp_path):
    g = run(tmp_path)
    steps = g.list_steps("t")
    assert steps["iteration"].tolist() == [0, 1, 2]

    g0 = g.read_graph("t", 0, 0)
    assert edge_set(g0) == common_edges("memory@initial", "initial")
    imp = g0.node("memory@initial")
    assert imp.is_import and imp.node == "memory" and imp.iteration == -1
    assert g0.node("net.lin_mem").roles == ("net.lin_mem.bias", "net.lin_mem.weight")

    g1 = g.read_graph("t", 0, 1)
    assert edge_set(g1) == common_edges("memory@0", "state")
    assert g1.node("memory@0").iteration == 0

    g2 = g.read_graph("t", 0, 2)
    assert edge_set(g2) == common_edges("memory@1", "state") | {
        ("memory", "output", "state", "output"),
        ("net.readout.weight", "output", "net.readout.weight", "output"),
        ("net.readout.bias", "output", "net.readout.bias", "output"),
        ("output", "loss", "output", "loss"),
        ("target", "loss", "target", "loss"),
    }
    # Iterations 1 and 2 differ (the loss), iteration 1 is structurally its own graph.
    assert len({g0.graph_hash, g1.graph_hash, g2.graph_hash}) == 3

    # Data of the initial value and of an import node is found where the node says.
    init = g.read_tensor("t", 0, imp.iteration, "memory", "initial", "forward", "batch_mean")
    assert init.values.shape == (H,) and not init.values.any()
    state1 = g.read_tensor("t", 0, 1, "memory", "state", "gradient:main", "sample", 2)
    assert state1.values.shape == (H,)


def test_graph_hash_is_stable_across_runs(tmp_path):
    a = run(tmp_path / "a").read_graph("t", 0, 1).graph_hash
    b = run(tmp_path / "b").read_graph("t", 0, 1).graph_hash
    assert a == b
