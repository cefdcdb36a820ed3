#!/usr/bin/env bash
# Installs a reference pi (the TypeScript pi coding agent) from the npm registry into a cache
# folder, with its own Node 22 (the npm package node@22: pi >= 1 needs Node >= 22.19, and one Node
# for every version keeps runs comparable). Tests and CI use it to run the reference and its own
# RpcClient against pi-rs.
#
#   tests/install_reference.sh 0.73.1          # install if missing, then describe it
#   tests/install_reference.sh 1.6.0
#   tests/install_reference.sh --check 1.6.0   # describe it only if installed (no network)
#
# It prints three lines (what tests/it/reference_clients.rs reads):
#   pi=<executable running the reference's CLI>
#   node=<the Node 22 binary>
#   package=<the pi-coding-agent package folder: dist/, docs/, package.json>
#
# Package by version: 0.x is @mariozechner/pi-coding-agent, 1.x and later
# @earendil-works/pi-coding-agent (override with PI_REFERENCE_PACKAGE). Cache folder:
# $PI_REFERENCE_CACHE/<version>, default ~/.cache/pi-rs-references/<version>. When npm is missing
# and apt-get is there (CI on Debian), Debian's npm is installed first, only to fetch node@22.
set -euo pipefail

check_only=0
if [[ ${1:-} == --check ]]; then
  check_only=1
  shift
fi
version=${1:-}
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: $0 [--check] <version>   (e.g. 0.73.1, 1.6.0)" >&2
  exit 2
fi
if [[ -n ${PI_REFERENCE_PACKAGE:-} ]]; then
  package_name=$PI_REFERENCE_PACKAGE
elif [[ $version == 0.* ]]; then
  package_name=@mariozechner/pi-coding-agent
else
  package_name=@earendil-works/pi-coding-agent
fi
dir=${PI_REFERENCE_CACHE:-$HOME/.cache/pi-rs-references}/$version
package=$dir/node_modules/$package_name
node=$dir/node_modules/node/bin/node
launcher=$dir/pi

installed() {
  [[ -f $package/package.json && -x $node && -x $launcher ]] &&
    grep -q "\"version\": *\"$version\"" "$package/package.json"
}

if ! installed; then
  if [[ $check_only == 1 ]]; then
    echo "reference pi $version is not installed in $dir (run: $0 $version)" >&2
    exit 1
  fi
  if ! command -v npm >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "install_reference: installing npm with apt-get" >&2
      apt-get update -qq >&2 && apt-get install -y -qq npm >/dev/null
    fi
    command -v npm >/dev/null 2>&1 || { echo "install_reference: npm is needed" >&2; exit 1; }
  fi
  mkdir -p "$dir"
  echo "install_reference: $package_name@$version and node@22 into $dir" >&2
  # node@22 installs its binary from the registry in its own install script.
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error \
    "$package_name@$version" node@22 >&2)
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node" "$package/dist/cli.js" >"$launcher"
  chmod +x "$launcher"
  installed || { echo "install_reference: $dir is incomplete after npm install" >&2; exit 1; }
fi

echo "pi=$launcher"
echo "node=$node"
echo "package=$package"
