"""Smoke test of an installed wheel, run by ``bash scripts/dev.sh wheel-test`` with the
python of a clean virtual environment that holds only the wheel and its dependencies,
from a working folder outside the source tree (so that ``import comgra_like`` finds the
installed package, never the checkout).

    python smoke.py --source SRC --wheel WHEEL --work DIR

Checks, each failing loudly with what is missing:
1. ``comgra_like`` is imported from the environment, not from SRC;
2. every file of the source tree's packages (``comgra_like/``, ``app/``, ``scripts/``:
   every module and every data file such as ``app/assets/``) is in the wheel, under
   ``comgra_like``, ``comgra_like.app`` and ``comgra_like.scripts``, and nothing lands
   at the top level but ``comgra_like``;
3. every installed module imports (a module of an optional extra, pyspark or duckdb,
   may miss its extra; a missing ``comgra_like`` module is a failure);
4. the console scripts run: ``comgra --help``, ``comgra-test-run`` on a short run and
   ``comgra findings`` on the example group;
5. a short ``watch()``ed training loop records, and ``comgra_like.query`` reads it back;
6. the GUI's app factory builds on the example group and serves a page and its assets.

Only the standard library is imported at the top: the functions that list files are
also used by tests/wheel_check/test_wheel.py in the development environment.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pkgutil
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path, PurePosixPath

# source folder -> the package it is installed as
ROOTS = {"comgra_like": "comgra_like", "app": "comgra_like/app", "scripts": "comgra_like/scripts"}
# development files that are not installed (setup.py skips them too)
NOT_INSTALLED_SUFFIXES = {".pyc", ".pyo", ".sh"}
# extras that a clean install does not have: modules that import them at the top, and
# modules that refuse to load without theirs (with a ConfigurationError naming the extra)
OPTIONAL_IMPORTS = {"pyspark", "duckdb", "lightning", "pytorch_lightning", "transformers"}
NEEDS_EXTRA = {"comgra_like.query.spark": "pyspark"}
EXAMPLE_GROUP = PurePosixPath("example_runs/tutorial")
STARTED = time.perf_counter()


class SmokeFailure(Exception):
    """A check of the installed wheel failed."""


def expected_wheel_files(source: Path) -> set[str]:
    """The paths inside a wheel that every file of the source packages must have."""
    expected = set()
    for folder, installed in ROOTS.items():
        root = source / folder
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix in NOT_INSTALLED_SUFFIXES:
                continue
            if any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
                continue
            expected.add(f"{installed}/{rel.as_posix()}")
    return expected


def check_wheel_contents(source: Path, wheel: Path) -> int:
    """Raise SmokeFailure naming every source file the wheel lacks and every top-level
    name other than comgra_like; return the number of files checked."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = expected_wheel_files(source)
    if not expected:
        raise SmokeFailure(f"no source files found under {source}")
    missing = sorted(expected - names)
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    problems = []
    if missing:
        problems.append(f"{len(missing)} source files are not in {wheel.name}:\n  "
                        + "\n  ".join(missing))
    if top != {"comgra_like"}:
        problems.append(f"top-level names in {wheel.name}: {sorted(top)} (only comgra_like)")
    if problems:
        raise SmokeFailure("\n".join(problems))
    return len(expected)


def _step(title: str) -> float:
    print(f"wheel smoke: {time.perf_counter() - STARTED:5.1f} s  {title}", flush=True)
    return time.perf_counter()


def _run(args: list[str], cwd: Path, timeout: float = 300) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise SmokeFailure(f"{' '.join(args)} exited {proc.returncode}:\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def check_installed(source: Path) -> None:
    import comgra_like

    where = Path(comgra_like.__file__).resolve()
    prefix = Path(sys.prefix).resolve()
    if prefix not in where.parents or source.resolve() in where.parents:
        raise SmokeFailure(f"comgra_like was imported from {where}, not from the "
                           f"environment {prefix}")


def check_imports() -> list[str]:
    """Import every installed module; return those skipped for a missing extra."""
    import comgra_like

    skipped = []
    failures = []
    for info in pkgutil.walk_packages(comgra_like.__path__, "comgra_like."):
        extra = NEEDS_EXTRA.get(info.name)
        if extra and importlib.util.find_spec(extra) is None:
            skipped.append(f"{info.name} (needs {extra})")
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            top = (e.name or "").split(".")[0]
            if top in OPTIONAL_IMPORTS:
                skipped.append(f"{info.name} (needs {top})")
            else:
                failures.append(f"{info.name}: {e}")
        except Exception as e:  # noqa: BLE001 - every failure is reported together
            failures.append(f"{info.name}: {type(e).__name__}: {e}")
    if failures:
        raise SmokeFailure("modules that do not import:\n  " + "\n  ".join(failures))
    return skipped


def check_console_scripts(work: Path, group: Path) -> None:
    bin_dir = Path(sys.executable).parent
    out = _run([str(bin_dir / "comgra"), "--help"], work)
    if "--path" not in out:
        raise SmokeFailure(f"comgra --help does not describe --path:\n{out}")
    _run([str(bin_dir / "comgra-test-run"), "--steps", "4", "--path", str(work / "runs"),
          "--quiet"], work)
    trials = sorted(p.name for p in (work / "runs").glob("*/trials/*"))
    if not trials:
        raise SmokeFailure(f"comgra-test-run recorded no trial under {work / 'runs'}")
    out = _run([str(bin_dir / "comgra"), "findings", "--path", str(group), "--json"], work)
    if not out.strip().startswith(("[", "{")):
        raise SmokeFailure(f"comgra findings --json printed no JSON:\n{out[:2000]}")


def check_watch(work: Path) -> None:
    import torch

    import comgra_like
    from comgra_like.query import open_group

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = comgra_like.watch(model, log_freq=1, standalone_dir=str(work / "watched"),
                               trial_id="smoke", verbose=False)
    for _ in range(3):
        x, y = torch.randn(5, 4), torch.randn(5, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    handle.unwatch()
    group = open_group(handle.group_path)
    ids = [t.trial_id for t in group.list_trials()]
    if ids != ["smoke"]:
        raise SmokeFailure(f"watch() recorded trials {ids}, expected ['smoke']")
    histograms = group.read_histograms("smoke")
    if len(histograms) == 0 or not set(histograms.module).issuperset({"model.0", "model.2"}):
        raise SmokeFailure(f"watch() histograms read back: {len(histograms)} rows")


def check_app(group: Path) -> None:
    from comgra_like.app import create_app

    app = create_app(group, prefetch=False)
    client = app.server.test_client()
    for url in ("/", "/assets/comgra.css", "/assets/comgra.js"):
        response = client.get(url)
        if response.status_code != 200:
            raise SmokeFailure(f"the app answers {url} with {response.status_code}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--wheel", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    args = parser.parse_args(argv)
    source, work = args.source.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    group = work / "example_group"
    shutil.copytree(source / EXAMPLE_GROUP, group)
    try:
        start = _step("comgra_like comes from the environment")
        check_installed(source)
        _step("the wheel holds every file of the source packages")
        count = check_wheel_contents(source, args.wheel)
        print(f"  {count} files")
        _step("every module imports")
        for name in check_imports():
            print(f"  skipped {name}")
        _step("console scripts: comgra --help, comgra-test-run, comgra findings")
        check_console_scripts(work, group)
        _step("watch() records and comgra_like.query reads back")
        check_watch(work)
        _step("the app factory builds on the example group")
        check_app(group)
    except SmokeFailure as e:
        print(f"wheel smoke FAILED: {e}", file=sys.stderr)
        return 1
    print(f"wheel smoke: all checks passed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
