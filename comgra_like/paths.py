"""Default places outside any group folder: where the tutorial's test run lives.

The GUI (``comgra --use-path-for-test-run``) and the tutorial (``comgra-test-run``) both
ask here, so that the GUI never imports the tutorial (which trains with torch). The
layout inside a group folder is :mod:`comgra_like.format.layout`'s business.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

#: The group written by ``comgra-test-run`` when no ``--group`` is given.
TEST_RUN_GROUP = "test_run"
#: The tutorial's example plugin, a file of the installed ``comgra_like.scripts``.
EXAMPLE_VISUALIZATION_FILE = "example_custom_visualization.py"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/comgra_like``, or ``~/.cache/comgra_like`` when XDG_CACHE_HOME is
    unset or not absolute (the XDG spec says to ignore a relative one)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "comgra_like"


def default_test_run_path() -> Path:
    """The group folder ``comgra-test-run`` writes by default: pass it to ``comgra --path``.

    Outside site-packages on purpose: recordings never land inside an installation.
    """
    return cache_dir() / TEST_RUN_GROUP


def example_visualization_path() -> Path:
    """The tutorial's example plugin for ``comgra --visualization-file``.

    Found without importing ``comgra_like.scripts`` (its location differs between a wheel
    and a checkout installed in editable mode).
    """
    spec = importlib.util.find_spec("comgra_like.scripts")
    if spec is None or not spec.submodule_search_locations:
        # not installed with the scripts: a path that does not exist, which callers check
        return Path(__file__).resolve().parent / "scripts" / EXAMPLE_VISUALIZATION_FILE
    return Path(next(iter(spec.submodule_search_locations))) / EXAMPLE_VISUALIZATION_FILE
