"""A screenshot of the Flight page (issue 30) with headless Chromium, for docs/images/.

    python benchmarks/screenshot_flight.py [--path GROUP] [--trial TRIAL] [--trigger NAME]
        [--out docs/images/flight.png] [--size 1280x1080] [--step STEP]

Without --path it records a small triggered group into a temporary folder first (needs
torch): the tests' MLP (tests/flight/loops.py) with the flight recorder armed (window 16),
recorded 1 step in 10, one bad batch at step 30 (a loss spike) and a NaN made in
``layer1`` at step 55. The page is shown at the NaN's trigger, the player at ``--step``
(default: where the page opens, the first non-finite step). The PNG is saved with a
reduced palette (Pillow, when installed) to stay small.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _browser import (
    chromium,
    console_errors,
    park_pointer,
    report_errors,
    save_screenshot,
    served,
    settle,
    wait_for_css,
)

REPO = Path(__file__).resolve().parent.parent


def record(root: Path) -> Path:
    """The triggered group of tests/app/test_flight_data.py, recorded into ``root``."""
    import torch

    sys.path.insert(0, str(REPO))
    from comgra_like import FlightRecorder
    from tests.flight.loops import train

    torch.set_num_threads(1)
    flight = FlightRecorder(window=16, full_steps=1, after=2)
    _, recorder = train(root, "mlp", 70, flight=flight, nan_at=(55, "layer1"),
                        outlier_at=30, record_one_in=10, lr=0.02, sample_ids=True)
    recorder.finalize()
    return root / "flight"


def shrink(path: Path) -> None:
    """Quantize the PNG to 128 colours (a page of flat colours: no visible change)."""
    try:
        from PIL import Image
    except ImportError:
        return
    image = Image.open(path).convert("RGB")
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--trial", default=None)
    parser.add_argument("--trigger", default=None)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/images/flight.png"))
    parser.add_argument("--size", default="1280x1080")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app
    from comgra_like.app.pages import flight

    tmp = None
    path, trial = args.path, args.trial
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="comgra_flight_")
        print("recording a triggered group …", flush=True)
        path, trial = record(Path(tmp.name)), "mlp"
    app = create_app(path)
    data = app.comgra_parts.data
    trial = trial or next(t for t in data.trial_ids() if flight.fd.triggers(data, t))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    try:
        with served(app) as base, chromium(width, height) as driver:
            driver.get(base + flight.link(trial, args.trigger))
            wait_for_css(driver, f"#{flight.GRAPH} .scatterlayer .point", timeout=60)
            wait_for_css(driver, f"#{flight.CHART} .scatterlayer .point", timeout=30)
            if args.step is not None:
                driver.execute_script(
                    "window.dash_clientside.set_props(arguments[0], {value: arguments[1]})",
                    flight.SLIDER, args.step)
                time.sleep(1.0)
            park_pointer(driver)
            settle(driver)
            save_screenshot(driver, args.out)
            errors += console_errors(driver)
    finally:
        if tmp is not None:
            tmp.cleanup()
    shrink(args.out)
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KB")
    return report_errors(errors)


if __name__ == "__main__":
    sys.exit(main())
