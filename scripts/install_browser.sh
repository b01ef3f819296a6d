#!/usr/bin/env bash
# The HTML report's browser test (tests/test_html_browser.py) needs a real headless browser: Debian's
# chromium package (a browser download at install time is not reachable, so playwright's own
# `playwright install` is never run) driven by playwright from the package index (pinned in
# requirements/cpu-lock.txt with pyee and greenlet; its driver ships inside the wheel).
# Idempotent: apt runs only when /usr/bin/chromium is missing, pip only when the interpreter cannot
# import playwright. Usage: scripts/install_browser.sh [PYTHON]  (default .tox/cpu-lock/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.tox/cpu-lock/bin/python}"
if [ ! -x /usr/bin/chromium ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
/usr/bin/chromium --version
if [ ! -x "$PY" ]; then  # the lock environment is not built yet: requirements/install.py brings playwright
    echo "$PY: not there yet; playwright comes with requirements/cpu-lock.txt when tox builds it"
    exit 0
fi
if ! "$PY" -c "import playwright.sync_api" 2>/dev/null; then
    pins=$(grep -E '^(playwright|pyee|greenlet)==' requirements/cpu-lock.txt)
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --disable-pip-version-check --no-deps $pins
fi
"$PY" -c "from importlib.metadata import version; print('playwright', version('playwright'))"
