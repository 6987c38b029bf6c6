"""The public face: what the README and docs/ teach users to import is the package root
or one of a few public modules, so internal folders (record/, format/, writer/, probe/,
...) can move without breaking anyone's script. docs/ARCHITECTURE.md (the developers'
map) may name internal modules."""

from __future__ import annotations

import re
import subprocess
import sys
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
    "comgra_like.integrations.lightning",
    "comgra_like.integrations.huggingface",
    "comgra_like.integrations.pytorch_lightning",
    "comgra_like.scripts.tutorial",
}

IMPORT = re.compile(r"^\s*(?:from\s+(comgra_like[\w.]*)\s+import|import\s+(comgra_like[\w.]*))",
                    re.MULTILINE)
# a dotted name used in prose or code: comgra_like.<internal folder>.<name>
DOTTED = re.compile(r"\bcomgra_like\.(record|format|writer|transport|probe|protocol)\.\w+")


def user_documents() -> list[Path]:
    return [ROOT / "README.md"] + sorted(
        p for p in (ROOT / "docs").glob("*.md") if p.name != "ARCHITECTURE.md")


def test_the_documents_import_only_public_modules():
    wrong = []
    for doc in user_documents():
        text = doc.read_text(encoding="utf-8")
        for m in IMPORT.finditer(text):
            module = m.group(1) or m.group(2)
            if module not in PUBLIC_MODULES:
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{doc.relative_to(ROOT)}:{line}: imports {module}")
        for m in DOTTED.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            wrong.append(f"{doc.relative_to(ROOT)}:{line}: names {m.group(0)}")
    assert wrong == [], ("teach the public face (comgra_like.<name>, see "
                         "comgra_like/__init__.py's _LAZY) instead:\n" + "\n".join(wrong))


def test_the_checker_sees_an_internal_import():
    text = "```python\nfrom comgra_like.record.flow import FlowChain\n```\n"
    (module,) = [m.group(1) or m.group(2) for m in IMPORT.finditer(text)]
    assert module == "comgra_like.record.flow" and module not in PUBLIC_MODULES
    assert DOTTED.search("run comgra_like.probe.serve(fn)")


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
