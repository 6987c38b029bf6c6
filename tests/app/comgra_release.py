"""comgra 0.11.5's own example plugin and tutorial script, from its released package.

Their code is not ours and is not committed: the release (a source archive on the
package index; a wheel if one is ever published) is downloaded at test time with pip into a cache folder outside the repository (``$COMGRA_RELEASE_CACHE``, else
``~/.cache/comgra_like_tests``), and the two files are read from it. Only their imports
are changed (and the tutorial's number of training steps). A download that fails makes
the test fail with pip's message: these tests prove compatibility and must not pass
without the files.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

COMGRA_VERSION = "0.11.5"
PLUGIN_MEMBER = "scripts/example_custom_visualization.py"
TUTORIAL_MEMBER = "scripts/run.py"
_ARCHIVES = (f"comgra-{COMGRA_VERSION}-*.whl", f"comgra-{COMGRA_VERSION}.tar.gz")


def cache_folder() -> Path:
    configured = os.environ.get("COMGRA_RELEASE_CACHE")
    base = Path(configured) if configured else Path.home() / ".cache" / "comgra_like_tests"
    return base / f"comgra-{COMGRA_VERSION}"


def _archives(folder: Path) -> list[Path]:
    return sorted(path for pattern in _ARCHIVES for path in folder.glob(pattern))


def release_path() -> Path:
    """comgra's released archive, downloaded once into the cache folder."""
    folder = cache_folder()
    cached = _archives(folder)
    if cached:
        return cached[0]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as download:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"comgra=={COMGRA_VERSION}",
             "--no-deps", "--disable-pip-version-check", "-q",
             "-d", download],
            check=False, capture_output=True, text=True, timeout=300,
        )
        found = _archives(Path(download))
        if result.returncode != 0 or not found:
            pytest.fail(
                f"Could not download comgra=={COMGRA_VERSION} from the package index with "
                f"pip (exit {result.returncode}); the comgra compatibility tests need its "
                f"example plugin and tutorial script.\n{result.stdout}\n{result.stderr}",
                pytrace=False,
            )
        folder.mkdir(exist_ok=True)
        target = folder / found[0].name
        os.replace(found[0], target)  # atomic: a second run never sees half an archive
    return target


def released_file(member: str) -> str:
    """The text of ``member`` (e.g. 'scripts/run.py') in comgra's released archive."""
    archive = release_path()
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            names = {name: name for name in wheel.namelist()}
            if member in names:
                return wheel.read(member).decode("utf-8")
    else:  # the source archive: comgra-<version>/src/<member>
        with tarfile.open(archive) as source:
            name = f"comgra-{COMGRA_VERSION}/src/{member}"
            try:
                return source.extractfile(name).read().decode("utf-8")
            except KeyError:
                pass
    pytest.fail(f"{archive.name} has no {member}", pytrace=False)


def _replace(text: str, pattern: str, replacement: str, what: str) -> str:
    changed, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if count == 0:
        pytest.fail(f"comgra's {what} no longer matches {pattern!r}", pytrace=False)
    return changed


def comgra_like_plugin() -> str:
    """comgra's example plugin with its imports changed for comgra_like."""
    text = released_file(PLUGIN_MEMBER)
    text = _replace(text, r"^import dash_svg\n", "", "plugin")  # imported, never used
    return _replace(
        text, r"^from comgra\.(objects|utilities) import ",
        "from comgra_like.app.comgra_plugins import ", "plugin",
    )


def comgra_like_tutorial(training_steps: int) -> str:
    """comgra's tutorial script with its imports changed, for a few training steps."""
    text = released_file(TUTORIAL_MEMBER)
    text = _replace(text, r"^import comgra$", "import comgra_like as comgra", "tutorial")
    text = _replace(text, r"^from comgra\.", "from comgra_like.", "tutorial")
    return _replace(
        text, r"num_training_steps = 20_000", f"num_training_steps = {training_steps}",
        "tutorial",
    )


def record_tutorial(root: Path, group: str = "tutorial", training_steps: int = 4) -> Path:
    """Run comgra's tutorial with comgra_like into ``root/group``; the group's folder."""
    script = root / "comgra_tutorial.py"
    script.write_text(comgra_like_tutorial(training_steps))
    (root / "data").mkdir(exist_ok=True)
    result = subprocess.run(
        [sys.executable, str(script), "--path", str(root / "data"), "--group", group],
        check=False, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root / "data" / group


def write_plugin(folder: Path) -> Path:
    path = folder / "example_custom_visualization.py"
    path.write_text(comgra_like_plugin())
    return path
