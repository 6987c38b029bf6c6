"""The one-way arrows of docs/ARCHITECTURE.md, checked on the source.

Every import statement of the package (``comgra_like/``) and the GUI (``app/``, installed
as ``comgra_like.app``) is read with ``ast``, including imports inside functions, and
each module is placed in a layer by its path. A wrong arrow fails here with the file and
line. A second test imports the GUI, the query API and the writer process in a fresh
interpreter and checks that torch was not loaded on the way.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer of a module, by its dotted name (the first matching prefix wins).
LAYERS = [
    ("comgra_like.app", "app"),
    ("comgra_like.scripts", "scripts"),
    ("comgra_like.query", "query"),
    ("comgra_like.analysis", "analysis"),
    ("comgra_like.format", "format"),
    ("comgra_like.writer.protocol", "protocol"),
    ("comgra_like.writer", "writer"),
    ("comgra_like.transport", "transport"),
    ("comgra_like.record", "record"),
    ("comgra_like.probe", "probe"),
    ("comgra_like.recorder", "record"),
    ("comgra_like.watching", "record"),  # watch(): the public face of record/hooks.py
    # the training side of the metrics (torch): hooks, the config resolved on a model
    ("comgra_like.metrics.collect", "record"),
    ("comgra_like.metrics.config", "record"),
    ("comgra_like.metrics.monitor", "monitor"),  # Taiyi's Monitor: records and reads back
    ("comgra_like.metrics", "metrics"),
    ("comgra_like.vocabulary", "shared"),
    ("comgra_like.errors", "shared"),
    ("comgra_like.objects", "shared"),
    ("comgra_like.paths", "shared"),
    ("comgra_like.notebook", "notebook"),  # show(): starts `comgra` in a process of its own
]

# Which layers each layer may import (besides itself). Data flows one way: the training
# process (record -> transport) hands steps to the writer, the writer writes the format,
# readers (query -> analysis -> app) read it.
ALLOWED = {
    "shared": {"shared"},
    "format": {"shared"},
    # the messages between the processes: both sides encode and decode with one module
    "protocol": {"shared"},
    # the quantities' math, computed in the writer process (and read by the training side)
    "metrics": {"shared"},
    "writer": {"shared", "format", "protocol", "metrics"},
    # the thread transport runs the writer's worker inside the training process
    "transport": {"shared", "format", "protocol", "writer"},
    "record": {"shared", "format", "protocol", "transport", "metrics"},
    "query": {"shared", "format", "metrics"},
    "analysis": {"shared", "format", "query"},
    "app": {"shared", "format", "query", "analysis", "metrics"},
    # Taiyi's Monitor records (record) and answers get_output() from the store (query)
    "monitor": {"shared", "format", "protocol", "transport", "record", "query", "metrics"},
    # the probe loop: serves edited inputs (record computes flows, format stores them)
    "probe": {"shared", "format", "record", "query"},
    # the tutorial trains (record), prints its findings (analysis), its plugin reads (query)
    "scripts": {"shared", "format", "record", "query", "analysis", "app", "probe"},
    "notebook": {"shared"},
}

# Third-party packages a layer must not import: the GUI and the writer run without torch;
# only the GUI may import dash and plotly.
FORBIDDEN_EXTERNAL = {
    "shared": {"torch", "dash", "plotly"},
    "format": {"torch", "dash", "plotly"},
    # the training process imports it: nothing heavy
    "protocol": {"torch", "dash", "plotly", "numpy", "pyarrow", "pandas"},
    "metrics": {"torch", "dash", "plotly", "pandas", "pyarrow"},
    "writer": {"torch", "dash", "plotly"},
    "transport": {"torch", "dash", "plotly"},
    "record": {"dash", "plotly"},
    "query": {"torch", "dash", "plotly"},
    "analysis": {"torch", "dash", "plotly"},
    "app": {"torch"},
    "probe": {"dash", "plotly"},
    "monitor": {"dash", "plotly"},
    "scripts": set(),
    "notebook": {"torch", "dash", "plotly"},
}


def _module_files():
    for base, package in ((ROOT / "comgra_like", "comgra_like"), (ROOT / "app", "comgra_like.app"),
                          (ROOT / "scripts", "comgra_like.scripts")):
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield path, ".".join([package, *parts]), path.name == "__init__.py"


def layer_of(module: str) -> str | None:
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def _imports(path: Path, module: str, is_package: bool):
    """(line, imported module) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # "from . import selection" imports a module
                yield node.lineno, f"{target}.{alias.name}"


def _violations():
    found: list[str] = []
    for path, module, is_package in _module_files():
        if module == "comgra_like":
            continue  # the package root re-exports lazily from every layer
        layer = layer_of(module)
        if layer is None:
            found.append(f"{path.relative_to(ROOT)}: no layer (add it to LAYERS)")
            continue
        for line, target in _imports(path, module, is_package):
            top = target.split(".")[0]
            if top in FORBIDDEN_EXTERNAL[layer]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {layer} imports {target}")
                continue
            if top != "comgra_like" or target == "comgra_like":
                continue
            other = layer_of(target)
            if other is None:
                # "from comgra_like.x import name" yields comgra_like.x.name too
                other = layer_of(target.rpartition(".")[0])
            if other is not None and other != layer and other not in ALLOWED[layer]:
                entry = f"{path.relative_to(ROOT)}: {layer} imports {other} ({target})"
                if not any(f.startswith(entry.partition(" (")[0]) for f in found):
                    found.append(entry)
    return found


# Wrong arrows that exist while they are being removed: each entry must still be a
# violation (remove it with its fix); nothing may be added. Empty since the writer writes
# every file of a trial (issue 13).
KNOWN: set[str] = set()


def test_every_import_follows_the_arrows():
    found = {entry.partition(" (")[0] for entry in _violations()}
    assert found - KNOWN == set(), sorted(_violations())
    assert KNOWN - found == set(), "fixed: remove these from KNOWN"


def test_the_checker_sees_a_wrong_arrow(tmp_path, monkeypatch):
    """The check itself: a query module that imports the recorder is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from ..recorder import ComgraRecorder\nimport torch\n")
    lines = [t for _, t in _imports(bad, "comgra_like.query.bad", False)]
    assert "comgra_like.recorder" in lines and "torch" in lines
    assert layer_of("comgra_like.recorder") == "record"
    assert "record" not in ALLOWED["query"] and "torch" in FORBIDDEN_EXTERNAL["query"]


@pytest.mark.parametrize("statement", [
    "from comgra_like.app import create_app",
    "import comgra_like.query",
    "from comgra_like.writer import process, worker",
    "import comgra_like.analysis.cli",
    "from comgra_like.probe import submit_input",
    "import comgra_like.format.vnittest, comgra_like.query.flows",
    "import comgra_like.metrics.quantities, comgra_like.metrics.spectra",
])
def test_no_torch_on_the_way(statement):
    code = f"import sys\n{statement}\nassert 'torch' not in sys.modules, 'torch was imported'\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)


def test_the_protocol_loads_nothing_heavy():
    """The training process imports the writer's protocol module: it must bring neither
    numpy, pyarrow nor torch, nor any other module of the writer."""
    code = ("import sys\nimport comgra_like.writer.protocol\n"
            "heavy = {'torch', 'numpy', 'pyarrow'} & set(sys.modules)\n"
            "writer = [m for m in sys.modules if m.startswith('comgra_like.writer.')]\n"
            "assert not heavy and writer == ['comgra_like.writer.protocol'], (heavy, writer)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
