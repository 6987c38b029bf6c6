"""``comgra``: start the GUI on a group folder.

comgra --path DIR|s3://BUCKET/PREFIX/GROUP [--s3-endpoint URL] [--port 8055] [--host 127.0.0.1] [--visualization-file FILE]
       [--use-path-for-test-run] [--refresh SECONDS] [--cache-mb MB] [--debug]
       [--token T] [--read-only | --allow-writes] [--allow-host NAME] [--max-request-mb MB]
       (the server and its access rules: server.py, access.py; docs/SERVING.md)
comgra findings --path DIR [--trial T] [--json] [--fail-on SEVERITY]   (analysis/cli.py)
comgra diff --path DIR TRIAL_A [TRIAL_B] [--tolerance T] [--json]       (analysis/diff_cli.py)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import pyarrow.fs as pafs

from comgra_like import paths
from comgra_like.errors import ComgraError
from comgra_like.format.files import files_for, is_object_store
from comgra_like.format.layout import TRIAL_JSON, TRIALS_DIR, is_hidden, trials_dir

from . import server
from .plugin import check_plugin_file
from .server import DEFAULT_HOST, DEFAULT_PORT  # noqa: F401  (the defaults, for callers)

#: glibc's malloc settings for the server (``mallopt``; the same as these environment
#: variables): a fixed mmap threshold, so that arrays of a MB or more (statistic columns,
#: series) are mapped and go back to the system when freed (glibc raises the threshold
#: to 32 MB after the first large free, and freed heap memory stays with the process);
#: and two arenas, not one per request thread (Dash answers each request in a thread of
#: its own; each arena kept its freed memory). With them the server's RSS after a
#: session on 100,000 steps was 33-64 MB above the same after malloc_trim (62-71 MB
#: without; benchmarks/benchmark_scale.py --default-malloc).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_ARENA_MAX": "2"}
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # malloc.h
#: The server waits at most this many seconds for the group's first index before it
#: serves; a larger group goes on being indexed in the background, and the pages show
#: the trials indexed so far (2,000 trials took 33-51 s to index before the server
#: answered at all).
START_INDEX_WAIT = 1.0


def bound_allocators() -> bool:
    """Apply :data:`MALLOC_ENV` to this process with ``mallopt`` (glibc only; whether it
    could); settings given in the environment win."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    done = True
    for (variable, value), option in zip(MALLOC_ENV.items(), (_M_MMAP_THRESHOLD, _M_ARENA_MAX)):
        if variable not in os.environ:
            done = bool(mallopt(option, int(value))) and done
    return done


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="comgra",
        description="Explore recordings of comgra_like's ComgraRecorder in the browser. "
        "The GUI reads new data while training is still running.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--path", type=Path, help="the group folder: <comgra_root_path>/<group> of the recorder "
        "(s3://bucket/prefix/group for a group on S3; credentials and region from the AWS_* "
        "environment variables)"
    )
    where.add_argument(
        "--use-path-for-test-run",
        action="store_true",
        help="open the group written by comgra-test-run (the tutorial), with its "
        "example visualization",
    )
    parser.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=None,
        help="an S3-compatible server for s3:// paths, e.g. http://127.0.0.1:9000 (sets "
        "AWS_ENDPOINT_URL_S3; default: that variable, AWS_ENDPOINT_URL, or AWS itself)",
    )
    parser.add_argument(
        "--visualization-file",
        type=Path,
        default=None,
        help="a Python file defining create_visualization(ctx) for the Visualization page",
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often to look for new data (default 2)",
    )
    parser.add_argument(
        "--cache-mb",
        type=float,
        default=256,
        metavar="MB",
        help="memory bound of the server-side caches (default 256): what the server "
        "holds beyond the group's index grows by at most this plus ~80 MB",
    )
    server.add_arguments(parser)
    return parser


def describe_object_path(path: Path) -> tuple[str, str | None]:
    """describe_path for an s3:// group: one listing tells whether anything is there."""
    files = files_for(path)
    shown = files.display(path)
    try:
        names = files.fs.get_file_info(pafs.FileSelector(files.key(path), allow_not_found=True))
    except OSError as exc:
        return "error", (
            f"cannot list {shown} ({' '.join(str(exc).split())}); check the bucket's name and "
            "the AWS_* environment variables (credentials, AWS_REGION; --s3-endpoint or "
            "AWS_ENDPOINT_URL for an S3-compatible server)")
    if not names:
        return "wait", (f"nothing is stored under {shown} yet. The GUI starts and shows the "
                        "data as soon as a recorder writes there (--path is "
                        "<comgra_root_path>/<group>).")
    return "ok", None


def describe_path(path: Path) -> tuple[str, str | None]:
    """('ok' | 'wait' | 'error', message) for a --path value, with a hint where it helps."""
    if not path.exists():
        return "wait", (
            f"{path} does not exist yet. The GUI starts and shows the data as soon "
            "as a recorder writes there (--path is <comgra_root_path>/<group>)."
        )
    if not path.is_dir():
        return (
            "error",
            f"{path} is a file; --path must be a group folder (<comgra_root_path>/<group>).",
        )
    if (path / TRIAL_JSON).exists() and path.parent.name == TRIALS_DIR:
        return "error", (
            f"{path} is one trial; pass its group folder instead: --path {path.parent.parent}"
        )
    if path.name == TRIALS_DIR and trials_dir(path.parent).is_dir():
        return "error", f"{path} is the trials folder; pass its group folder: --path {path.parent}"
    trials = trials_dir(path)
    if not trials.is_dir():
        groups = (
            sorted(p for p in path.iterdir() if trials_dir(p).is_dir()) if path.is_dir() else []
        )
        if groups:
            choices = ", ".join(str(g) for g in groups[:5])
            return "error", (
                f"{path} is not a group folder but contains groups: {choices}. "
                f"Pass one of them, e.g. --path {groups[0]}"
            )
        return "wait", (
            f"{path} has no recordings yet (no trials/ folder). The GUI starts and "
            "waits for a recorder to write there."
        )
    if not any(p.is_dir() and not is_hidden(p.name) for p in trials.iterdir()):
        return "wait", f"{path} has no trials yet. The GUI starts and waits for data."
    return "ok", None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["findings"]:  # `comgra findings ...`: comgra_like/analysis/cli.py
        from comgra_like.analysis.cli import main as findings_main

        return findings_main(argv[1:])
    if argv[:1] == ["diff"]:  # `comgra diff ...`: comgra_like/analysis/diff_cli.py
        from comgra_like.analysis.diff_cli import main as diff_main

        return diff_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG, format="comgra: %(levelname)s: %(message)s")
    visualization_file = args.visualization_file
    if args.use_path_for_test_run:
        path = paths.default_test_run_path()
        if visualization_file is None and paths.example_visualization_path().exists():
            visualization_file = paths.example_visualization_path()
        if not path.exists():
            print(
                f"comgra: there is no test run at {path} yet; create it with `comgra-test-run`. "
                "The GUI starts and waits for it.",
                file=sys.stderr,
            )
    elif is_object_store(args.path):
        if args.s3_endpoint:  # for this process and the ones it starts
            os.environ["AWS_ENDPOINT_URL_S3"] = args.s3_endpoint
        path = args.path
    else:
        path = args.path.expanduser()
    if not is_object_store(path):
        path = path.absolute()

    try:
        verdict, message = (describe_object_path(path) if is_object_store(path)
                            else describe_path(path))
    except ComgraError as exc:  # e.g. a malformed endpoint
        verdict, message = "error", str(exc)
    if verdict == "error":
        print(f"comgra: error: {message}", file=sys.stderr)
        return 2
    if message and not args.use_path_for_test_run:
        print(f"comgra: {message}", file=sys.stderr)

    if args.refresh <= 0:
        print("comgra: error: --refresh must be a positive number of seconds", file=sys.stderr)
        return 2
    if args.cache_mb <= 0:
        print("comgra: error: --cache-mb must be positive", file=sys.stderr)
        return 2
    if visualization_file is not None:
        visualization_file = visualization_file.expanduser().absolute()
        if not visualization_file.is_file():
            print(
                f"comgra: error: the visualization file {visualization_file} does not exist",
                file=sys.stderr,
            )
            return 2
        problem = check_plugin_file(visualization_file)
        if problem:
            print(
                f"comgra: warning: {problem}\nThe Visualization page shows this error until the "
                "file is fixed (it is re-imported when it changes).",
                file=sys.stderr,
            )
    try:
        options = server.options_from_args(args)
    except ComgraError as exc:
        print(f"comgra: error: {exc}", file=sys.stderr)
        return 2
    if not options.loopback:
        print(
            f"comgra: warning: listening on {args.host}: anyone who can reach this machine "
            "and has the token can read these recordings"
            + (" (read-only: --allow-writes lets them write requests into the group)."
               if options.read_only else ", and the Flow page can write into the group."),
            file=sys.stderr,
        )
        if options.debug:
            print("comgra: warning: --debug shows the server's Python tracebacks in the page "
                  "to everyone with the token; keep it on this machine.", file=sys.stderr)

    from . import create_app

    bound_allocators()
    app = create_app(
        path,
        visualization_file=visualization_file,
        refresh_seconds=args.refresh,
        cache_bytes=int(args.cache_mb * 2**20),
        read_only=options.read_only,
        index_wait=START_INDEX_WAIT,
    )

    def announce(urls: list[str]) -> None:
        lines = [f"comgra: showing {files_for(path).display(path)}"
                 + (" (read-only)" if options.read_only else "")]
        lines += [f"comgra: open {url}" for url in urls]
        lines[-1] += " (Ctrl+C stops)"
        print("\n".join(lines), flush=True)

    return server.serve(app, options, announce)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
