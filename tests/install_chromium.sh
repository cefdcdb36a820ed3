#!/usr/bin/env bash
# Installs headless Chromium from Debian's packages for the HTML export rendering test
# (src/export/tests.rs). Under CI=true that test fails when chromium is missing.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
    || echo "install_chromium: could not install chromium; the export rendering test will fail under CI=true" >&2
fi
