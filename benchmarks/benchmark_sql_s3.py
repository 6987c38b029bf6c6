"""Whole-group SQL on disk and on S3, the same group and queries side by side (issue 19).

    python benchmarks/benchmark_sql_s3.py [--path GROUP] [--trials 4] [--steps 500]
        [--nodes 60] [--repeat 3] [--endpoint URL]

The group (``--path``, or a synthetic one built with ``make_synthetic_group.py``) is
uploaded to an S3-compatible server: ``--endpoint`` with the AWS_* credentials of the
environment, or (the default) a moto server started on loopback. Then the scans of
``benchmark_sql.py`` run with ``comgra_like.query.sql`` on the folder (DuckDB's own
parquet reader) and on ``s3://`` (pyarrow datasets over the objects, scanned by DuckDB):
``cold`` connects anew (listing, footers), ``opened`` reuses a connection. Prints the
median seconds and the ratio S3 / disk; the answers are checked to be equal.

moto is a Python server on the same two cores: its figures are the cost of the requests
on this machine, not those of a real object store (more latency per request, more
bandwidth).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).parent))

from benchmark_sql import AGGREGATE_SQL, MATERIALIZE_SQL, timed

from comgra_like.format.files import s3_options
from comgra_like.query import connect


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port),
                             "-H", "127.0.0.1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=2).close()
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit("the moto server did not start (pip install 'moto[server]')")
            time.sleep(0.2)


def query(location: str | Path, text: str) -> pd.DataFrame:
    db = connect(location)
    try:
        return db.sql(text)
    finally:
        db.close()


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    a = a.sort_values(list(a.columns)).reset_index(drop=True)
    b = b.sort_values(list(b.columns)).reset_index(drop=True)
    return a.equals(b)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", type=Path, help="an existing group (else a synthetic one)")
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--endpoint", help="an S3-compatible server (default: moto on loopback)")
    p.add_argument("--bucket", default="comgra-bench")
    a = p.parse_args()
    server = None
    if a.endpoint is None:
        server, a.endpoint = start_moto()
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        os.environ.setdefault("AWS_REGION", "us-east-1")
    os.environ["AWS_ENDPOINT_URL"] = a.endpoint
    try:
        path = a.path
        if path is None:
            from make_synthetic_group import build

            path = build(Path(tempfile.mkdtemp()) / "group", a.trials, a.steps, a.nodes,
                         100, 20)
        fs = pafs.S3FileSystem(**s3_options(), allow_bucket_creation=True)
        fs.create_dir(a.bucket)
        prefix = f"{a.bucket}/{uuid.uuid4().hex[:8]}/{path.name}"
        start = time.perf_counter()
        pafs.copy_files(str(path), prefix, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        remote = f"s3://{prefix}"
        objects = [f for f in path.rglob("*") if f.is_file()]
        size = sum(f.stat().st_size for f in objects)
        rows = int(query(path, "SELECT count(*) AS n FROM tensors")["n"][0])
        print(f"group: {rows:,} tensor rows, {len(objects)} files, {size / 2**20:.0f} MiB "
              f"(uploaded in {time.perf_counter() - start:.1f} s); median of {a.repeat}")
        print(f"{'scan':<20} {'disk s':>8} {'S3 s':>8} {'ratio':>7} {'rows':>10}")
        for kind, text in (("aggregate", AGGREGATE_SQL), ("materialize", MATERIALIZE_SQL)):
            local_db, remote_db = connect(path), connect(remote)
            cold = (lambda t=text: query(path, t), lambda t=text: query(remote, t))
            warm = (lambda t=text, db=local_db: db.sql(t),
                    lambda t=text, db=remote_db: db.sql(t))
            for mode, (on_disk, on_s3) in (("cold", cold), ("opened", warm)):
                disk_s, disk_result = timed(on_disk, a.repeat)
                s3_s, s3_result = timed(on_s3, a.repeat)
                if not same(disk_result, s3_result):
                    sys.exit(f"{kind}: disk and S3 disagree")
                print(f"{kind + ', ' + mode:<20} {disk_s:>8.3f} {s3_s:>8.3f} "
                      f"{s3_s / disk_s:>6.1f}x {len(s3_result):>10,}")
            local_db.close()
            remote_db.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
