"""A screenshot of the Metrics page at real size (issue 27):
docs/screenshots/metrics_gpt2_12layer.png.

    python benchmarks/screenshot_metrics_gpt2.py [--path GROUP] [--size 1280x800]
        [--steps 20] [--view types] [--search WORDS] [--keep DIR]
        [--out docs/screenshots/metrics_gpt2_12layer.png]

Without --path it records a 12-layer GPT-2 (n_embd=32, built from its config: no
download; needs torch and transformers) with ``comgra_like.watch(model, metrics=...)``:
the weight norm of every ``Conv1D`` every 2 steps and its output RMS every step, 48
modules per metric. The page shows them in the --view chosen (auto, lines, types,
heatmap), filtered by --search when given. Uses benchmarks/_browser.py's helpers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _browser import (
    chromium,
    console_errors,
    group_to_show,
    park_pointer,
    report_errors,
    save_screenshot,
    served,
    settle,
    wait_for_css,
)

#: What the recorded run computes (Taiyi's config format): 48 modules per metric.
CONFIG = {"Conv1D": [["WeightNorm", "linear(2, 0)"], "OutputRMS"]}


def record_gpt2(root: Path, steps: int = 20, layers: int = 12) -> Path:
    """A ``layers``-layer GPT-2 trained for ``steps`` steps under watch(metrics=CONFIG)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import comgra_like

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=64,
                                       n_positions=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    group = root / "gpt2"
    gen = torch.Generator().manual_seed(1)
    with comgra_like.watch(model, log_freq=1000, standalone_dir=str(group), verbose=False,
                           trial_id=f"gpt2_{layers}_layers", metrics=CONFIG):
        for _ in range(steps):
            x = torch.randint(0, 64, (4, 16), generator=gen)
            loss = model(input_ids=x, labels=x).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return group


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--out", type=Path,
                        default=Path("docs/screenshots/metrics_gpt2_12layer.png"))
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--steps", type=int, default=20, help="steps of the recorded run")
    parser.add_argument("--view", default="auto", choices=["auto", "lines", "types",
                                                           "heatmap"])
    parser.add_argument("--search", default="")
    parser.add_argument("--keep", type=Path, default=None,
                        help="record into this folder (kept) instead of a temporary one")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    from comgra_like.app import create_app

    def record(root: Path) -> Path:
        return record_gpt2(root, steps=args.steps)

    with group_to_show(args.path, args.keep, "comgra_metrics_gpt2_", record,
                       f"{args.steps} steps of a 12-layer GPT-2") as path:
        app = create_app(path, prefetch=False)
        with served(app) as base, chromium(width, height) as driver:
            driver.get(f"{base}/metrics")
            wait_for_css(driver, ".metrics-card .scatterlayer .trace, .metrics-empty",
                         timeout=90)
            settle(driver)
            if args.view != "auto":
                driver.find_element(
                    "css selector", f"#metrics-view input[value='{args.view}']").click()
                settle(driver)
            if args.search:
                box = driver.find_element("css selector", "#metrics-search")
                box.send_keys(f"{args.search}\n")
                settle(driver)
            park_pointer(driver)
            save_screenshot(driver, args.out)
            errors = console_errors(driver)
    shrink(args.out)
    return report_errors(errors)


def shrink(path: Path) -> None:
    """The PNG in 256 colours when Pillow is installed (not a dependency): ~220 KiB of
    anti-aliased lines become ~80 KiB, the text and lines as readable."""
    try:
        from PIL import Image
    except ImportError:
        print("Pillow not installed: the screenshot is kept in full colour")
        return
    image = Image.open(path).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                   dither=Image.Dither.NONE).save(path, optimize=True)
    print(f"shrunk {path} to 256 colours ({path.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    sys.exit(main())
