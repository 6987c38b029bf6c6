#!/usr/bin/env bash
# Set-up and the two everyday commands, for a fresh machine:
#   bash scripts/dev.sh gui    the GUI on the committed example run (http://127.0.0.1:8055)
#   bash scripts/dev.sh test   the whole test suite, browser tests included
# Everything goes into .venv in the repository; nothing is installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY="$VENV/bin/python"

setup_python() {
    local extra="$1"
    if [ ! -x "$PY" ]; then
        python3 -m venv "$VENV"
    fi
    # The CPU build of torch first: a plain "torch" requirement would pull a CUDA build.
    if ! "$PY" -c "import torch" 2>/dev/null; then
        "$PY" -m pip install -q "torch==2.13.0"
    fi
    local stamp="$VENV/.installed-$extra"
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        "$PY" -m pip install -q -e ".$extra"
        touch "$stamp"
    fi
}

setup_browser() {
    if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
        return
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium chromium-driver
}

case "${1:-}" in
    gui)
        shift
        setup_python ""
        exec "$VENV/bin/comgra" --path example_runs/tutorial \
            --visualization-file scripts/example_custom_visualization.py "$@"
        ;;
    test)
        shift
        setup_browser
        setup_python "[test]"
        set +e
        REQUIRE_BROWSER=1 "$VENV/bin/python" -m pytest "$@"
        rc=$?
        set -e
        if [ "$rc" -eq 5 ]; then
            echo "pytest collected no tests: that is a failure here" >&2
            exit 1
        fi
        exit "$rc"
        ;;
    *)
        echo "usage: bash scripts/dev.sh gui|test [arguments]" >&2
        exit 2
        ;;
esac
