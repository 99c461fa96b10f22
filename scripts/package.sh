#!/usr/bin/env bash
# Builds the Debian package dist/tianshu_VERSION-1_ARCH.deb: a Release build of the tianshu
# binary alone (no tests, no build paths recorded) in build-pkg/, then `cpack -G DEB`. -O2, as
# Debian builds its own packages (dpkg-buildflags), not CMake's Release -O3: 10% less build time
# (201 s against 223 s on 2 cores). Warnings are not errors here (a compiler's new warnings must
# not stop a packager). A unity build, as in scripts/build.sh but in batches of 16: half the
# compile time of one file at a time. Ninja, which compiles a library's files while the ones it
# links are still building (186 s against make's 201 s).
#   scripts/package.sh            # build it, print its path and sizes
#   scripts/package.sh --check    # and check it (scripts/check-package.sh)
#   scripts/package.sh --from-build build [--check]
#                                 # package the binary a configured build tree already built
#                                 # (CTest does, with build/: the same sources at the same -O2,
#                                 # stripped by CPack, and no second build on CI's two cores)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
check=""; from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --from-build)
      [ $# -ge 2 ] || { echo "package: --from-build needs a build directory" >&2; exit 2; }
      from=$2; shift ;;
    *) echo "package: unknown argument $1 (--check, --from-build DIR)" >&2; exit 2 ;;
  esac
  shift
done
tree=build-pkg
if [ -n "$from" ]; then
  tree=$from
  [ -f "$tree/CMakeCache.txt" ] || { echo "package: $tree is not a configured build tree" >&2; exit 2; }
else
  # A build-pkg/ an older version configured for make: Ninja cannot take it over.
  if [ -f build-pkg/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build-pkg/CMakeCache.txt; then
    rm -rf build-pkg
  fi
  cmake -S . -B build-pkg -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIANSHU_BUILD_TESTS=OFF \
    -DTIANSHU_FIND_SOURCE_DATA=OFF -DTIANSHU_WERROR=OFF -DCMAKE_INSTALL_PREFIX=/usr \
    -DCMAKE_CXX_FLAGS_RELEASE='-O2 -DNDEBUG' -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >/dev/null
fi
cmake --build "$tree" -j "$jobs" --target tianshu tianshu_package_docs 2>&1 |
  grep -vE '^\[ *[0-9]+(%|/[0-9]+)\]|^Consolidate|^Scanning|^Built target|^make|^ninja: no work' || true
rm -f dist/tianshu_*.deb
# CPack installs what the rules name (the binary, not the tianshu.source-dir beside it) and
# strips it: the package holds no build path either way.
(cd "$tree" && cpack -G DEB >/dev/null)
deb=$(ls dist/tianshu_*.deb)
echo "package: $deb from $tree ($(du -k "$deb" | cut -f1) KiB; installed" \
     "$(dpkg-deb -f "$deb" Installed-Size) KiB; binary $(du -k "$tree/tools/tianshu/tianshu" | cut -f1) KiB before strip)"
echo "depends: $(dpkg-deb -f "$deb" Depends)"
if [ -n "$check" ]; then
  exec scripts/check-package.sh "$deb"
fi
