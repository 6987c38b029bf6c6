"""The public face: what the README and docs/ teach users to import is the package root
or one of a few public modules, so internal folders (record/, format/, writer/, probe/,
...) can move without breaking anyone's script. docs/ARCHITECTURE.md (the developers'
map) may name internal modules."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import types
from pathlib import Path

import comgra_like

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = {
    "comgra_like",
    "comgra_like.recorder",  # comgra's import path: `from comgra.recorder import ...`
    "comgra_like.objects",  # comgra's decision makers
    "comgra_like.errors",
    "comgra_like.metrics",  # Taiyi's config and UserMetric
    "comgra_like.query",
    "comgra_like.query.spark",  # pyspark imported only there
    "comgra_like.analysis",
    "comgra_like.notebook",  # %load_ext comgra_like.notebook, running(), stop()
    "comgra_like.integrations.lightning",
    "comgra_like.integrations.pytorch_lightning",
    "comgra_like.integrations.huggingface",
    "comgra_like.app",  # create_app
    "comgra_like.app.comgra_plugins",  # comgra 0.11.5 visualization files
    "comgra_like.scripts.tutorial",  # the comgra-test-run command
    "comgra_like.scripts.make_examples",  # python -m
    "comgra_like.scripts.flow_walkthrough",  # python -m
}

# `from comgra_like.x import a, b` (the names, parenthesised over lines or not) and
# `import comgra_like.x`
IMPORT = re.compile(r"^\s*(?:from\s+(comgra_like[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)"
                    r"|import\s+(comgra_like[\w.]*))", re.MULTILINE)
# any dotted name in prose or code: comgra_like.<name>.<name>...
DOTTED = re.compile(r"\bcomgra_like(?:\.[A-Za-z_]\w*)+")
_MISSING = object()


def user_documents() -> list[Path]:
    return [ROOT / "README.md"] + sorted(
        p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")


def imported_names(text: str) -> list[tuple[int, str]]:
    """(offset, dotted name) of every import: ``from m import a`` gives ``m.a``."""
    found = []
    for m in IMPORT.finditer(text):
        if m.group(3):
            found.append((m.start(), m.group(3)))
            continue
        names = re.sub(r"#.*", "", m.group(2)).strip("() \n")
        for name in names.split(","):
            name = name.split(" as ")[0].strip()
            if name and name != "*":
                found.append((m.start(), f"{m.group(1)}.{name}"))
    return found


def problem(dotted: str) -> str | None:
    """What is wrong with a dotted name a document teaches (None: it is the public face).

    Fine: a public module, a package holding public modules (``comgra_like.scripts``),
    or a public module's attribute that is no module (``comgra_like.query.sql``, the
    function). Wrong: an internal module, or a name under one; a name that does not
    exist. A public module that cannot be imported here (its framework is not
    installed) is not looked into."""
    if dotted in PUBLIC_MODULES or any(m.startswith(dotted + ".") for m in PUBLIC_MODULES):
        return None
    parts = dotted.split(".")
    n = max(i for i in range(1, len(parts)) if ".".join(parts[:i]) in PUBLIC_MODULES)
    try:
        obj: object = importlib.import_module(".".join(parts[:n]))
    except ImportError:
        return None
    for i in range(n, len(parts)):
        name = ".".join(parts[:i + 1])
        attribute = getattr(obj, parts[i], _MISSING)
        if attribute is _MISSING and isinstance(obj, types.ModuleType) and \
                importlib.util.find_spec(name) is not None:
            return f"an internal module ({name})"
        if attribute is _MISSING:
            return f"no such name ({name})"
        if isinstance(attribute, types.ModuleType) and attribute.__name__ not in PUBLIC_MODULES:
            return f"an internal module ({attribute.__name__})"
        obj = attribute
    return None


def test_the_documents_teach_only_the_public_face():
    wrong = []
    for doc in user_documents():
        text = doc.read_text(encoding="utf-8")
        named = [(m.start(), m.group(0)) for m in DOTTED.finditer(text)]
        for start, dotted in sorted(set(imported_names(text) + named)):
            why = problem(dotted)
            if why is not None:
                line = text.count("\n", 0, start) + 1
                wrong.append(f"{doc.relative_to(ROOT)}:{line}: {dotted}: {why}")
    assert wrong == [], ("teach the public face (comgra_like.<name>, see "
                         "comgra_like/__init__.py's _LAZY, and the public modules of "
                         "docs/ARCHITECTURE.md) instead:\n" + "\n".join(wrong))


def test_the_checker_sees_an_internal_import():
    text = ("```python\nfrom comgra_like.record.flow import FlowChain\n"
            "from comgra_like.query import (open_group,\n    optimizer)  # a module\n```\n")
    assert [name for _, name in imported_names(text)] == [
        "comgra_like.record.flow.FlowChain", "comgra_like.query.open_group",
        "comgra_like.query.optimizer"]
    assert problem("comgra_like.record.flow.FlowChain") == (
        "an internal module (comgra_like.record)")
    assert problem("comgra_like.query.open_group") is None
    assert problem("comgra_like.query.optimizer.read_optimizer_state") == (
        "an internal module (comgra_like.query.optimizer)")
    assert problem("comgra_like.query.read_optimizer_state") is None
    assert problem("comgra_like.query.sql") is None  # the function, not the module
    assert problem("comgra_like.notebook.running") is None
    assert problem("comgra_like.scripts") is None  # holds public modules
    assert problem("comgra_like.query.no_such_read") == (
        "no such name (comgra_like.query.no_such_read)")
    assert [m.group(0) for m in DOTTED.finditer("run comgra_like.probe.serve(fn).")] == [
        "comgra_like.probe.serve"]
    assert problem("comgra_like.probe.serve") == "an internal module (comgra_like.probe)"


def architecture_public_modules() -> set[str]:
    """The modules docs/ARCHITECTURE.md lists under "The public face" (its bullets)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text[text.index("**The public face.**"):text.index("Everything else may move.")]
    bullets = [line for line in section.splitlines() if line.startswith(("- ", "  "))]
    return {m for line in bullets for m in re.findall(r"`(comgra_like(?:\.\w+)+)`", line)}


def test_the_public_modules_are_those_architecture_md_lists():
    assert architecture_public_modules() == PUBLIC_MODULES - {"comgra_like"}


def test_every_public_name_resolves():
    for name in comgra_like.__all__:
        assert name == "my_recorder" or getattr(comgra_like, name) is not None, name
    assert set(comgra_like.__all__) <= set(dir(comgra_like))


def test_the_root_imports_without_torch():
    code = ("import sys, comgra_like\n"
            "assert 'torch' not in sys.modules\n"
            "comgra_like.open_group, comgra_like.find, comgra_like.submit_input\n"
            "assert 'torch' not in sys.modules, 'a torch-free name loaded torch'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)
