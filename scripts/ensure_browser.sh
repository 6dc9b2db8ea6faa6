#!/usr/bin/env bash
# `make test` drives the demo page and JupyterLab in Debian's Chromium (Playwright's own browser builds cannot
# be downloaded here). Install it when it is missing and we are root with apt-get; otherwise say what to do and
# go on (the browser tests then fail with the same advice, unless SPECDEC_SKIP_BROWSER=1 turns them off).
set -euo pipefail
if [ "${SPECDEC_SKIP_BROWSER:-}" = 1 ] || command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo ">> installing Debian's chromium for the browser tests (first run only)"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
else
  echo ">> chromium is missing and this is not root: the browser tests will fail." \
       "Install it (sudo apt-get install chromium) or set SPECDEC_SKIP_BROWSER=1 to skip them on purpose." >&2
fi
