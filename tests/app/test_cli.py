"""The ``comgra`` command (comgra_like.app.cli): arguments and messages, without serving."""

from __future__ import annotations

import pytest
from comgra_like.app import cli


@pytest.fixture
def no_serving(monkeypatch):
    """Replace Dash's server: record what main() would run (the run's arguments; the app
    it would serve is at ``.apps``)."""

    class Calls(list):
        """One entry per run: its arguments; ``apps``: the apps it would serve."""

    calls = Calls()
    calls.apps = []

    def fake_run(self, **kwargs):
        calls.append(kwargs)
        calls.apps.append(self)

    monkeypatch.setattr("dash.Dash.run", fake_run)
    return calls


def test_defaults_bind_localhost_and_print_the_url(no_serving, tiny_group, capsys):
    assert cli.main(["--path", str(tiny_group)]) == 0
    assert no_serving == [
        {"host": "127.0.0.1", "port": 8055, "debug": False, "use_reloader": False}
    ]
    out = capsys.readouterr().out
    assert "http://127.0.0.1:8055/" in out


def test_options_reach_the_app(no_serving, tiny_group, tmp_path):
    plugin = tmp_path / "vis.py"
    plugin.write_text("def create_visualization(ctx):\n    return 'x'\n")
    assert (
        cli.main(
            [
                "--path",
                str(tiny_group),
                "--port",
                "9000",
                "--refresh",
                "0.5",
                "--cache-mb",
                "64",
                "--visualization-file",
                str(plugin),
            ]
        )
        == 0
    )
    parts = no_serving.apps[0].comgra_parts
    assert parts.data.refresh_seconds == 0.5
    caches = parts.data.cache_usage()
    assert caches["limit"] == 64 * 2**20
    assert parts.plugin.path == plugin.resolve()
    assert no_serving[0]["port"] == 9000


def test_missing_path_starts_and_waits(no_serving, tmp_path, capsys):
    assert cli.main(["--path", str(tmp_path / "not_yet")]) == 0
    assert "does not exist yet" in capsys.readouterr().err


def test_wrong_folders_get_a_hint(tiny_group, capsys):
    assert cli.main(["--path", str(tiny_group.parent)]) == 2
    assert f"--path {tiny_group}" in capsys.readouterr().err
    assert cli.main(["--path", str(tiny_group / "trials" / "trial_a")]) == 2
    assert f"--path {tiny_group}" in capsys.readouterr().err


def test_missing_plugin_file_is_an_error_and_a_broken_one_a_warning(
    no_serving, tiny_group, tmp_path, capsys
):
    assert (
        cli.main(["--path", str(tiny_group), "--visualization-file", str(tmp_path / "x.py")]) == 2
    )
    assert "does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken.py"
    broken.write_text("def create_visualization(:\n")
    assert cli.main(["--path", str(tiny_group), "--visualization-file", str(broken)]) == 0
    err = capsys.readouterr().err
    assert "SyntaxError" in err and "re-imported" in err


def test_bad_numbers_and_missing_path_argument(capsys):
    with pytest.raises(SystemExit):
        cli.main([])
    assert cli.main(["--path", ".", "--refresh", "0"]) == 2


def test_use_path_for_test_run(no_serving, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cli.main(["--use-path-for-test-run"]) == 0
    captured = capsys.readouterr()
    assert "comgra-test-run" in captured.err
    # the tutorial's default group, found without importing the tutorial
    assert f"showing {tmp_path / 'comgra_like' / 'test_run'}" in captured.out


def test_other_hosts_are_warned_about(no_serving, tiny_group, capsys):
    assert cli.main(["--path", str(tiny_group), "--host", "0.0.0.0"]) == 0
    assert "anyone who can reach this machine" in capsys.readouterr().err
