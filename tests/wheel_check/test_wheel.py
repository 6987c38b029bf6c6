"""The built wheel holds every module and data file of the source tree (issue 26: a
hand-written package list left out comgra_like/metrics, and only an editable install
worked). The full check, a clean environment with the wheel installed and smoke-tested
from outside the source tree, is ``bash scripts/dev.sh wheel-test`` (run by .ci/run);
here the wheel is built from a copy of the source tree and its contents compared."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .smoke import SmokeFailure, check_wheel_contents, expected_wheel_files

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "comgra_like", "app", "scripts")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built by pip (isolated build, as a user's `pip install .`) from a copy of
    the source tree, so that the checkout gets no build/ folder."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(work / "dist"), str(src)], check=True, capture_output=True,
                   timeout=300)
    (built,) = (work / "dist").glob("comgra_like-*.whl")
    return built


def test_the_wheel_holds_every_module_and_data_file(wheel):
    count = check_wheel_contents(REPO, wheel)
    names = set(zipfile.ZipFile(wheel).namelist())
    # the subpackage the hand-written list missed, a data file, the renamed folders
    assert {"comgra_like/metrics/quantities.py", "comgra_like/app/assets/comgra.css",
            "comgra_like/app/pages/__init__.py", "comgra_like/scripts/tutorial.py"} <= names
    assert count == len(expected_wheel_files(REPO)) > 100
    assert "comgra_like/scripts/dev.sh" not in names
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "comgra = comgra_like.app.cli:main" in entry_points
    assert "comgra-test-run = comgra_like.scripts.tutorial:main" in entry_points


def _without(wheel: Path, out: Path, drop_prefix: str = "", add: str = "") -> Path:
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            if not (drop_prefix and name.startswith(drop_prefix)):
                target.writestr(name, source.read(name))
        if add:
            target.writestr(add, "")
    return out


def test_a_missing_subpackage_is_named(wheel, tmp_path):
    broken = _without(wheel, tmp_path / "broken.whl", drop_prefix="comgra_like/metrics/")
    with pytest.raises(SmokeFailure) as e:
        check_wheel_contents(REPO, broken)
    assert "comgra_like/metrics/quantities.py" in str(e.value)
    assert "comgra_like/metrics/__init__.py" in str(e.value)


def test_a_top_level_app_package_is_refused(wheel, tmp_path):
    odd = _without(wheel, tmp_path / "odd.whl", add="app/__init__.py")
    with pytest.raises(SmokeFailure, match=r"top-level names.*'app'"):
        check_wheel_contents(REPO, odd)


def test_ci_runs_the_wheel_test():
    ci = (REPO / ".ci" / "run").read_text()
    assert "wheel-test" in ci
