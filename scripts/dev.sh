#!/usr/bin/env bash
# Set-up and the two everyday commands, for a fresh machine:
#   bash scripts/dev.sh gui    the GUI on the committed example run (http://127.0.0.1:8055)
#   bash scripts/dev.sh test   the whole test suite, browser tests included
#   bash scripts/dev.sh setup-test   only install what the tests need (idempotent)
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

# Java for the Spark test (tests/query/test_spark.py, pyspark in local mode): pyspark 4
# needs Java 17 or newer; the system's default JRE is that on Debian 12 and Ubuntu 24.04.
setup_java() {
    if command -v java >/dev/null \
        && java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then
        return
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q default-jre-headless
}

# Everything the test suite needs: the browser, the [test] extra, Java and the [spark] extra.
setup_test() {
    setup_browser
    setup_java
    setup_python "[test]"
    setup_python "[spark]"
}

case "${1:-}" in
    gui)
        shift
        setup_python ""
        exec "$VENV/bin/comgra" --path example_runs/tutorial \
            --visualization-file scripts/example_custom_visualization.py "$@"
        ;;
    setup-test)
        setup_test
        ;;
    test)
        shift
        setup_test
        set +e
        REQUIRE_BROWSER=1 REQUIRE_SPARK=1 REQUIRE_S3=1 "$VENV/bin/python" -m pytest "$@"
        rc=$?
        set -e
        if [ "$rc" -eq 5 ]; then
            echo "pytest collected no tests: that is a failure here" >&2
            exit 1
        fi
        exit "$rc"
        ;;
    *)
        echo "usage: bash scripts/dev.sh gui|test [arguments]|setup-test" >&2
        exit 2
        ;;
esac
