#!/usr/bin/env bash
# Builds every plugin not written in Rust into target/plugins/other/<name>.wasm
# (<name>: the plugin's folder, `-` as `_`, like the Rust components).
#
#   bash plugins/build-other-languages.sh
#
# - Python (plugins/python-*/app.py): componentize-py, installed at the pinned
#   version into a venv at target/other-languages/venv.
# - JavaScript (plugins/js-*/package.json): componentize-js, installed by
#   `npm ci` into the plugin's node_modules, driven by plugins/js-sdk/build.mjs.
#
# Needs python3 (with venv) and node/npm; fetches packages from PyPI and npm
# only when they are missing. Idempotent: a component newer than all of its
# inputs (sources, SDK, wit/, the toolchain) is not rebuilt. Concurrent runs
# are serialized by a lock in target/other-languages.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
plugins="$root/plugins"
work="$root/target/other-languages"
out="$root/target/plugins/other"
venv="$work/venv"
mkdir -p "$work" "$out"

exec 9>"$work/.lock"
flock 9

log() { printf 'build-other-languages: %s\n' "$*" >&2; }

# True when $1 exists and is newer than every file under the other arguments.
up_to_date() {
  local target="$1"
  shift
  [[ -f "$target" ]] || return 1
  [[ -z "$(find "$@" -newer "$target" -type f -not -path '*/__pycache__/*' -print -quit 2>/dev/null)" ]]
}

# Writes a component through a temporary file so that a failed or interrupted
# build never leaves a fresh-looking output behind.
publish() {
  local tmp="$1" dest="$2"
  mv -f "$tmp" "$dest"
  log "built $dest ($(stat -c %s "$dest") bytes) in $3 s"
}

python_plugins=()
for dir in "$plugins"/python-*/; do
  [[ -f "$dir/app.py" ]] && python_plugins+=("${dir%/}")
done
js_plugins=()
for dir in "$plugins"/js-*/; do
  [[ -f "$dir/package.json" ]] && js_plugins+=("${dir%/}")
done

if ((${#python_plugins[@]})); then
  stamp="$venv/.componentize-py-$COMPONENTIZE_PY_VERSION"
  if [[ ! -f "$stamp" ]]; then
    log "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
    touch "$stamp"
  fi
  for dir in "${python_plugins[@]}"; do
    name="$(basename "$dir")"
    dest="$out/${name//-/_}.wasm"
    if up_to_date "$dest" "$dir" "$plugins/python-sdk" "$root/wit" "$stamp"; then
      continue
    fi
    log "componentize-py: $name"
    start=$SECONDS
    # Build from a copy: the interpreter writes __pycache__ next to sources.
    stage="$work/stage/$name"
    rm -rf "$stage"
    mkdir -p "$stage"
    cp -R "$dir" "$stage/app"
    cp -R "$plugins/python-sdk" "$stage/sdk"
    (cd "$stage/app" && "$venv/bin/componentize-py" --quiet -d "$root/wit" -w handler \
      componentize app -p . -p ../sdk -o "$dest.tmp") >&2
    publish "$dest.tmp" "$dest" $((SECONDS - start))
  done
fi

for dir in "${js_plugins[@]}"; do
  name="$(basename "$dir")"
  dest="$out/${name//-/_}.wasm"
  installed="$dir/node_modules/.package-lock.json"
  if ! up_to_date "$installed" "$dir/package.json" "$dir/package-lock.json"; then
    log "npm ci: $name"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
    touch "$installed"
  fi
  entry="$(cd "$dir" && node -p 'require("./package.json").main')"
  if up_to_date "$dest" "$dir/$entry" "$plugins/js-sdk" "$root/wit" "$installed"; then
    continue
  fi
  log "componentize-js: $name"
  start=$SECONDS
  (cd "$dir" && node "$plugins/js-sdk/build.mjs" "$entry" "$dest.tmp") >&2
  publish "$dest.tmp" "$dest" $((SECONDS - start))
done
