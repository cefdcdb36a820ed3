#!/usr/bin/env bash
# Installs the official Agent Client Protocol SDK (`@agentclientprotocol/sdk`, npm) into
# target/acp-sdk/: its schema (schema/v1/schema.json) decides pi-rs's ACP names, and its client
# side drives `pi --mode acp` in tests/it/acp.rs (tests/clients/acp_client.mjs). Also pi-acp, the
# third-party adapter that puts ACP in front of `pi --mode rpc` (that route keeps a test).
# Versions are pinned so a CI run tests what a local run tested. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
dir=target/acp-sdk
mkdir -p "$dir"
if [ ! -f "$dir/node_modules/@agentclientprotocol/sdk/package.json" ] \
  || [ ! -f "$dir/node_modules/pi-acp/dist/index.js" ]; then
  [ -f "$dir/package.json" ] || echo '{"private":true}' > "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    @agentclientprotocol/sdk@2.4.0 pi-acp@0.0.34
fi
echo "acp sdk: $dir/node_modules/@agentclientprotocol/sdk"
echo "pi-acp: $dir/node_modules/pi-acp"
