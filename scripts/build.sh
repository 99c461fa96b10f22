#!/usr/bin/env bash
# Configures and builds Tianshu into build/ (RelWithDebInfo). Incremental on a second run.
# Debug information is line tables only (-g1): backtraces and sanitizer reports name the file and
# line, and the build takes a quarter less time than with full -g (configure build/ yourself with
# -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -g -DNDEBUG' to step through locals in gdb).
# A unity build: each target's sources are compiled in batches of 8, so the heavy headers
# (CLI11, nlohmann/json, httplib, gtest) are parsed once a batch, not once a file. A source whose
# names in an anonymous namespace are another source's of its target is left out of the batches
# (SKIP_UNITY_BUILD_INCLUSION in its CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# A new tree uses Ninja (it compiles a library's files while the ones it links are still
# building); a tree configured before keeps its generator.
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG' -DCMAKE_UNITY_BUILD=ON >/dev/null
fi
cmake --build build -j "$jobs" 2>&1 | grep -vE '^\[ *[0-9]+(%|/[0-9]+)\]|^Consolidate|^Scanning|^Built target' || true
test -x build/tools/tianshu/tianshu
