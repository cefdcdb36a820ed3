#!/usr/bin/env bash
# Installs tinyproxy, the real CONNECT proxy the corporate-network tests route provider traffic
# through (tests/it/network.rs). Called from .ci/run; safe to run again.
set -euo pipefail
if command -v tinyproxy >/dev/null 2>&1 || [ -x /usr/bin/tinyproxy ] || [ -x /usr/sbin/tinyproxy ]; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tinyproxy >/dev/null
  # The package starts a system-wide daemon; the tests run their own.
  (service tinyproxy stop || systemctl stop tinyproxy) >/dev/null 2>&1 || true
else
  echo "install_proxy: no apt-get; install tinyproxy yourself" >&2
  exit 1
fi
