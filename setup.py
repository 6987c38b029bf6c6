"""Which packages and data files the wheel holds, found by walking the source tree.

Everything else is in pyproject.toml. The three top-level folders are installed under
the project's own name, so that no generic top-level package named ``app`` or
``scripts`` lands in site-packages:

    comgra_like/  ->  comgra_like
    app/          ->  comgra_like.app
    scripts/      ->  comgra_like.scripts

Every folder below them is a package (a new subpackage cannot be left out, as
``comgra_like.metrics`` was when the list was written by hand), and every file in them
is installed: modules, and the rest as package data (``app/assets/``), except caches
and the development shell scripts (``scripts/dev.sh``). ``bash scripts/dev.sh wheel-test`` checks the built
wheel against the source tree (docs/INSTALL.md).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
ROOTS = {"comgra_like": "comgra_like", "comgra_like.app": "app", "comgra_like.scripts": "scripts"}
SKIPPED_DIRS = {"__pycache__"}
SKIPPED_SUFFIXES = {".pyc", ".pyo", ".sh"}


def _walk(root: Path):
    """Every file below root, skipping caches and hidden folders, in a stable order."""
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p in SKIPPED_DIRS or p.startswith(".") for p in parts):
            continue
        if path.is_file() and path.suffix not in SKIPPED_SUFFIXES:
            yield path


def discover() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """(packages, package_dir, package_data) for setuptools. Every folder that holds an
    installed file is a package (a data folder such as app/assets/ too, as setuptools
    wants it: importable as a namespace package), and owns its non-Python files."""
    packages: dict[str, Path] = {}
    data: dict[str, list[str]] = {}
    for name, folder in ROOTS.items():
        root = HERE / folder
        packages[name] = root
        for path in _walk(root):
            package = ".".join((name, *path.parent.relative_to(root).parts))
            packages[package] = path.parent
            if path.suffix != ".py":
                data.setdefault(package, []).append(path.name)
    package_dir = {name: path.relative_to(HERE).as_posix() for name, path in packages.items()}
    return sorted(packages), package_dir, data


PACKAGES, PACKAGE_DIR, PACKAGE_DATA = discover()

setup(packages=PACKAGES, package_dir=PACKAGE_DIR, package_data=PACKAGE_DATA)
