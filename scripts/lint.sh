#!/usr/bin/env bash
# Checks the C++ tree against .clang-format (and, without --format-only, .clang-tidy using
# build/compile_commands.json). Exit 1 when a file needs changes; prints which.
set -uo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*.cc' 'src/*.h' 'tools/*.cc' \
                     'tools/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 'bench/*.h')
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "lint: $f is not clang-formatted (run: clang-format -i $f)"
    bad=1
  fi
done
if [ "${1:-}" != "--format-only" ]; then
  [ -f build/compile_commands.json ] || { echo "lint: build first (scripts/build.sh)"; exit 1; }
  for f in "${files[@]}"; do
    case "$f" in *.cc) ;; *) continue ;; esac
    out=$(clang-tidy -p build --quiet "$f" 2>/dev/null | grep -E 'warning:|error:')
    if [ -n "$out" ]; then echo "$out"; bad=1; fi
  done
fi
[ $bad -eq 0 ] && echo "lint: ${#files[@]} files clean"
exit $bad
