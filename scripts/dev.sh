#!/usr/bin/env bash
# Set-up and the two everyday commands, for a fresh machine:
#   bash scripts/dev.sh gui    the GUI on the committed example run (http://127.0.0.1:8055)
#   bash scripts/dev.sh test   the whole test suite, browser tests included
#   bash scripts/dev.sh setup-test   only install what the tests need (idempotent)
#   bash scripts/dev.sh wheel-test   build the sdist and from it the wheel, install the wheel
#                                    into a new clean environment and smoke-test it there
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
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ]; then
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

# The package as a user gets it: `python -m build` makes the sdist and from the sdist the
# wheel (so the sdist is checked too), the wheel goes into a new virtual environment with
# nothing else but the CPU torch and its own dependencies, and tests/wheel_check/smoke.py
# runs from a folder outside the source tree (docs/INSTALL.md says what it checks).
# Everything is made in a temporary folder, removed at the end; pip's cache is reused.
wheel_test() {
    local src="$PWD" work
    work="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    SECONDS=0
    echo "wheel-test: copying the source tree to $work/src"
    mkdir "$work/src"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        # what a clean clone has, plus new files not yet committed (not the ignored ones)
        git ls-files -z --cached --others --exclude-standard \
            | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
            | tar --null -T - -cf - | tar -xf - -C "$work/src"
    else
        cp -r pyproject.toml setup.py README.md comgra_like app scripts "$work/src/"
    fi
    echo "wheel-test: building the sdist and from it the wheel"
    python3 -m venv "$work/build-env"
    "$work/build-env/bin/python" -m pip install -q build
    if ! "$work/build-env/bin/python" -m build --outdir "$work/dist" "$work/src" \
        >"$work/build.log" 2>&1; then
        cat "$work/build.log" >&2
        echo "wheel-test: the build failed" >&2
        return 1
    fi
    local wheel
    wheel="$(ls "$work"/dist/*.whl)"
    echo "wheel-test: installing $(basename "$wheel") into a clean environment"
    python3 -m venv "$work/venv"
    # the CPU build of torch first: the wheel's plain "torch" requirement is then met;
    # no byte-compiling of every installed file (3x faster; imports compile what they use)
    "$work/venv/bin/python" -m pip install -q --no-compile "torch==2.13.0"
    "$work/venv/bin/python" -m pip install -q --no-compile "$wheel"
    cp tests/wheel_check/smoke.py "$work/smoke.py"
    mkdir "$work/run"
    (cd "$work/run" && "$work/venv/bin/python" "$work/smoke.py" \
        --source "$src" --wheel "$wheel" --work "$work/run")
    echo "wheel-test: passed in $SECONDS s"
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
    wheel-test)
        wheel_test
        ;;
    *)
        echo "usage: bash scripts/dev.sh gui|test [arguments]|setup-test|wheel-test" >&2
        exit 2
        ;;
esac
