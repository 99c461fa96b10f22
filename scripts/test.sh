#!/usr/bin/env bash
# Runs every test this machine can run: installs dependencies, builds, runs CTest (unit tests,
# cross-module tests, the lint checks, the data checksums, the Debian package check). Tests
# that need a GPU are labelled `gpu` and excluded.
# With CI set (as CI runs it), the clone is first copied into an empty temporary folder and the
# suite runs there: nothing beside the clone (no sibling folder, no earlier build) can be used.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${CI:-}" ] && [ -z "${TIANSHU_ISOLATED:-}" ]; then
  scratch=$(mktemp -d /tmp/tianshu-ci.XXXXXX)
  echo "test: copying the clone to $scratch/tianshu (nothing beside it) and testing there"
  mkdir "$scratch/tianshu"
  # What the clone holds: tracked files (less any deleted in the work tree) and untracked ones
  # git does not ignore, and .git.
  { git ls-files -co --exclude-standard -z |
      while IFS= read -r -d '' f; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
      done
    printf '.git\0'; } |
    tar --null -T - -cf - | tar -xf - -C "$scratch/tianshu"
  status=0
  (cd "$scratch/tianshu" && TIANSHU_ISOLATED=1 scripts/test.sh "$@") || status=$?
  if [ $status -eq 0 ]; then rm -rf "$scratch"; else echo "test: kept $scratch for a look"; fi
  exit $status
fi
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -LE gpu "$@"
