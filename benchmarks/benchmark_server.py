"""The GUI's server: waitress (``comgra``) against Werkzeug's development server
(``comgra --debug``, the server before issue 26), on the example group.

    python benchmarks/benchmark_server.py [--path example_runs/tutorial] [--seconds 5]

Starts each as a real ``comgra --port 0`` process on 127.0.0.1 and measures, from this
process: the median time of 50 sequential requests for the layout (``/_dash-layout``), the
dependencies and the largest JavaScript bundle of the page, and requests per
second for the layout with 8 client threads for --seconds. Prints the load average beside
them (the figures move with other work on the machine).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]


def start(path: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "comgra_like.app.cli", "--path", str(path), "--port", "0",
         *flags], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in process.stdout:
        match = re.search(r"open (http://127\.0\.0\.1:\d+)/", line)
        if match:
            return process, match.group(1)
    raise SystemExit(f"comgra {' '.join(flags)} did not start")


def median_ms(session: requests.Session, url: str, n: int = 50) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        answer = session.get(url, timeout=60)
        _ = answer.content  # the whole body
        times.append(time.perf_counter() - t)
        answer.raise_for_status()
    return 1000 * statistics.median(times)


def per_second(url: str, seconds: float, threads: int = 8) -> float:
    done = [0] * threads
    end = time.monotonic() + seconds

    def work(i: int) -> None:
        session = requests.Session()
        while time.monotonic() < end:
            session.get(url, timeout=60).raise_for_status()
            done[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", type=Path, default=ROOT / "example_runs" / "tutorial")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    largest = None  # the largest bundle of waitress's page, asked of both servers
    for name, flags in (("waitress", ()), ("werkzeug (--debug)", ("--debug",))):
        process, base = start(args.path, *flags)
        try:
            session = requests.Session()
            if largest is None:
                page = session.get(base + "/", timeout=60).text
                bundles = re.findall(r'src="(/_dash-component-suites/[^"]+)"', page)
                sizes = {b: len(session.get(base + b, timeout=60).content) for b in bundles}
                largest = max(sizes, key=sizes.get)
            layout = median_ms(session, base + "/_dash-layout")
            dependencies = median_ms(session, base + "/_dash-dependencies")
            bundle = median_ms(session, base + largest, n=20)
            rate = per_second(base + "/_dash-layout", args.seconds)
            print(f"{name:20s} layout {layout:6.1f} ms  dependencies {dependencies:6.1f} ms  "
                  f"{Path(largest.split('?')[0]).name} ({sizes[largest] / 2**20:.1f} MB) "
                  f"{bundle:6.1f} ms  layout x 8 threads {rate:6.0f}/s  "
                  f"load {os.getloadavg()[0]:.1f}")
        finally:
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
