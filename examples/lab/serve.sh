#!/usr/bin/env bash
# Builds the attention lab for wasm32 with the wasm-bindgen CLI and serves it on
# http://127.0.0.1:${PORT:-8000}/ (localhost only; the page loads nothing from elsewhere).
# Needs: rustup target add wasm32-unknown-unknown; wasm-bindgen-cli at the version of
# wasm-bindgen in Cargo.lock. Set NO_SERVE=1 to build only.
#
#   examples/lab/serve.sh --release      then open http://127.0.0.1:8000/
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --example lab --target wasm32-unknown-unknown --no-default-features "$@"
target_dir=$(cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
profile=debug
case " $* " in *" --release "*) profile=release ;; esac
wasm-bindgen --target web --no-typescript --out-dir examples/lab/pkg \
    "$target_dir/wasm32-unknown-unknown/$profile/examples/lab.wasm"

if [ -z "${NO_SERVE:-}" ]; then
    port=${PORT:-8000}
    echo "serving http://127.0.0.1:$port/ (Ctrl-C to stop)"
    exec python3 -m http.server "$port" --bind 127.0.0.1 --directory examples/lab
fi
