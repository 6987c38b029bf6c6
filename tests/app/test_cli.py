"""The ``comgra`` command (comgra_like.app.cli): arguments and messages, without serving."""

from __future__ import annotations

import pytest
from comgra_like.app import cli, server


@pytest.fixture
def no_serving(monkeypatch):
    """Replace the server: record what main() would serve (the options as a dict; the app
    it would serve is at ``.apps``, the ServeOptions at ``.options``)."""

    class Calls(list):
        """One entry per serve: host, port, debug, read_only; ``apps``, ``options``."""

    calls = Calls()
    calls.apps = []
    calls.options = []

    def fake_serve(app, options, announce):
        calls.append({"host": options.host, "port": options.port, "debug": options.debug,
                      "read_only": options.read_only})
        calls.apps.append(app)
        calls.options.append(options)
        announce(server.urls(options, options.port))
        return 0

    monkeypatch.setattr(server, "serve", fake_serve)
    return calls


def test_defaults_bind_localhost_and_print_the_url(no_serving, tiny_group, capsys):
    assert cli.main(["--path", str(tiny_group)]) == 0
    assert no_serving == [
        {"host": "127.0.0.1", "port": 8055, "debug": False, "read_only": False}
    ]
    assert no_serving.options[0].token is None
    assert not no_serving.apps[0].comgra_parts.read_only
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


def test_other_hosts_are_warned_about_get_a_token_and_are_read_only(no_serving, tiny_group,
                                                                   capsys, monkeypatch):
    assert cli.main(["--path", str(tiny_group), "--host", "0.0.0.0"]) == 0
    captured = capsys.readouterr()
    assert "anyone who can reach this machine" in captured.err
    options = no_serving.options[0]
    assert options.read_only and no_serving.apps[0].comgra_parts.read_only
    assert len(options.token) >= 32  # generated: 24 random bytes
    assert f"http://127.0.0.1:8055/?token={options.token}" in captured.out
    assert "(read-only)" in captured.out
    assert "--debug shows" not in captured.err
    monkeypatch.setattr("logging.basicConfig", lambda **_: None)  # this process's logging
    assert cli.main(["--path", str(tiny_group), "--host", "0.0.0.0", "--debug"]) == 0
    assert "--debug shows the server's Python tracebacks" in capsys.readouterr().err


def test_token_and_write_flags(no_serving, tiny_group, monkeypatch, capsys):
    assert cli.main(["--path", str(tiny_group), "--host", "0.0.0.0", "--allow-writes",
                     "--token", "a-long-token"]) == 0
    assert no_serving.options[-1].token == "a-long-token"
    assert not no_serving.options[-1].read_only
    monkeypatch.setenv("COMGRA_TOKEN", "from-the-environment")
    assert cli.main(["--path", str(tiny_group), "--read-only"]) == 0
    assert no_serving.options[-1].token == "from-the-environment"  # loopback too, if given
    assert no_serving.options[-1].read_only
    assert cli.main(["--path", str(tiny_group), "--token", "short"]) == 2
    assert "at least 8" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one or the other
        cli.main(["--path", str(tiny_group), "--read-only", "--allow-writes"])
    assert cli.main(["--path", str(tiny_group), "--max-request-mb", "0"]) == 2


def test_host_allow_list(no_serving, tiny_group):
    assert cli.main(["--path", str(tiny_group), "--allow-host", "Comgra.Example"]) == 0
    hosts = no_serving.options[-1].hosts
    assert hosts.allows("localhost:8055") and hosts.allows("127.0.0.1:8055")
    assert hosts.allows("[::1]:8055") and hosts.allows("comgra.example:8055")
    assert not hosts.allows("evil.example:8055") and not hosts.allows("10.1.2.3:8055")
    assert not hosts.allows(None)
    assert cli.main(["--path", str(tiny_group), "--host", "0.0.0.0"]) == 0
    hosts = no_serving.options[-1].hosts
    assert hosts.allows("10.1.2.3:8055")  # an address cannot be rebound; a name can
    assert not hosts.allows("evil.example")
    assert cli.main(["--path", str(tiny_group), "--allow-host", "*"]) == 0
    assert no_serving.options[-1].hosts.allows("evil.example")
