#!/usr/bin/env bash
# Builds the fully static pi for containers (README "Containers") and prints its path.
#
# musl when its Rust target is installed (`rustup target add x86_64-unknown-linux-musl`),
# otherwise a static-pie glibc build of the host target (`-C target-feature=+crt-static`). An
# explicit --target keeps the flag off build scripts and proc-macros, which must stay dynamic.
# The build goes to target/static so the normal build's artifacts are not invalidated.
# PI_STATIC_TARGET picks the target; PI_STATIC_PROFILE the cargo profile (default release).
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
musl="${host%%-*}-unknown-linux-musl"
target=${PI_STATIC_TARGET:-}
if [ -z "$target" ]; then
  if rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
    target=$musl
  else
    target=$host
  fi
fi
profile=${PI_STATIC_PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/static}
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --locked --profile "$profile" --target "$target" --bin pi >&2
dir=$profile
[ "$profile" = dev ] && dir=debug
echo "$CARGO_TARGET_DIR/$target/$dir/pi"
