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

# The fetched real models (scripts/fetch-models.sh), linked into the served folder so the
# page loads them from this server; models/index.json lists what is there.
models=examples/lab/models
rm -rf "$models"
mkdir -p "$models"
cache="${WGPU_ATTENTION_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/wgpu-attention/models}"
entries=()
if [ -f "$cache/minilm/model/model.safetensors" ]; then
    for f in config.json model.safetensors tokenizer.json; do
        ln -s "$cache/minilm/model/$f" "$models/minilm-$f"
    done
    entries+=('{"name": "minilm", "kind": "bert", "label": "all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads)", "files": ["models/minilm-config.json", "models/minilm-model.safetensors", "models/minilm-tokenizer.json"]}')
fi
if [ -f "$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    ln -s "$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$models/smollm2.gguf"
    entries+=('{"name": "smollm2", "kind": "llama", "label": "SmolLM2-135M-Instruct (llama, 30 layers x 9 heads over 3 KV heads; large)", "files": ["models/smollm2.gguf"]}')
fi
(IFS=,; echo "[${entries[*]}]") > "$models/index.json"

if [ -z "${NO_SERVE:-}" ]; then
    port=${PORT:-8000}
    echo "serving http://127.0.0.1:$port/ (Ctrl-C to stop)"
    exec python3 -m http.server "$port" --bind 127.0.0.1 --directory examples/lab
fi
