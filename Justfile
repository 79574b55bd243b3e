# Convenience recipes. Each is one plain cargo command: nothing requires `just`.

# List the recipes.
default:
    @just --list

# Build the example plugins and the host, then run the demo on examples/ (args go to `informer-host run`).
demo *ARGS:
    cargo run --release -p xtask -- demo {{ARGS}}

# Validate examples/host.toml and type-check its plugins.
check:
    cargo run --release -p xtask -- check

# Build the guest plugins for wasm32-wasip2 into target/plugins.
plugins:
    cargo run -p xtask -- plugins

# The whole test suite (what CI runs after the lints).
test:
    cargo test --workspace

# Formatting and clippy for the host workspace and the plugins workspace, as CI runs them.
lint:
    cargo fmt --all --check
    cargo fmt --all --check --manifest-path plugins/Cargo.toml
    cargo clippy --workspace --all-targets -- -D warnings
    cargo clippy --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml --target-dir target/plugins -- -D warnings

# Format everything.
fmt:
    cargo fmt --all
    cargo fmt --all --manifest-path plugins/Cargo.toml

# The benchmarks (engine, then wasm against native).
bench:
    cargo bench -p informer-host --bench informer
    cargo bench -p informer-host --bench wasm

# Run the reported benchmarks (wasm, scale) and rewrite docs/benchmarks.md's generated tables and docs/plots.
bench-report:
    cargo run --release -p xtask -- bench-report

# What CI runs.
ci:
    bash .ci/run
