#!/usr/bin/env bash
#! The test command (README, .ci/run): installs libtorch on first use, checks for (as root:
#! installs) bubblewrap, the code sandbox, then runs the workspace tests. Extra arguments go to
#! `cargo test`. The tests build with --release, like `./scripts/fulcrum`, so that the two share
#! one compiled copy of every dependency (Cargo.toml, crates/workspace-hack).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-libtorch.sh
./scripts/setup-sandbox.sh
cargo test --workspace --release "$@"
