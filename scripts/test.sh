#!/usr/bin/env bash
# Runs every test this machine can run: installs dependencies, builds, runs CTest (unit tests,
# cross-module tests, the lint check). Tests that need a GPU are labelled `gpu` and excluded.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -LE gpu "$@"
