#!/usr/bin/env bash
# What tests/browser/ needs on a Debian CI machine: Debian's chromium and the playwright Python package.
# Idempotent, and a no-op when both are there. Playwright's own browser download is never used: the test drives
# /usr/bin/chromium. Call it with the course's virtual environment active (or PYTHON=/path/to/python).
set -euo pipefail

# The interpreter to install playwright into: $PYTHON, else the active virtual environment's, else python3.
PY=${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}
PY=${PY:-python3}

if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo -n); fi
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
        chromium fonts-liberation >/dev/null
fi

if ! "$PY" -c "import playwright.sync_api" 2>/dev/null; then
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$PY" -m pip install -q playwright
fi

echo "browser test: $(/usr/bin/chromium --version 2>/dev/null | head -1)," \
     "playwright $("$PY" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
