#!/usr/bin/env bash
# Installs the real MCP servers the integration tests use (nobody here wrote them), from npm,
# into target/mcp-servers/: @modelcontextprotocol/server-everything (stdio and streamable HTTP).
# The version is pinned so a CI run tests what a local run tested. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
dir=target/mcp-servers
mkdir -p "$dir"
if [ ! -f "$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ]; then
  [ -f "$dir/package.json" ] || echo '{"private":true}' > "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
    @modelcontextprotocol/server-everything@2026.8.31
fi
echo "mcp servers: $dir/node_modules/@modelcontextprotocol/server-everything"
