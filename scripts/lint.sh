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
  # clang-tidy 14 knows C++23 as c++2b; give it a copy of the compile database that says so.
  db=$(mktemp -d)
  sed 's/-std=c++23/-std=c++2b/g' build/compile_commands.json > "$db/compile_commands.json"
  for f in "${files[@]}"; do
    case "$f" in *.cc) ;; *) continue ;; esac
    out=$(clang-tidy -p "$db" --quiet "$f" 2>/dev/null | grep -E 'warning:|error:')
    if [ -n "$out" ]; then echo "$out"; bad=1; fi
  done
fi
[ -n "${db:-}" ] && rm -rf "$db"
[ $bad -eq 0 ] && echo "lint: ${#files[@]} files clean"
exit $bad
