#!/usr/bin/env bash
# Checks the tree: no file reads or names a path outside the repository (such as the shared
# folder beside it that the data sets came from); the C++ files against .clang-format and,
# without --format-only, .clang-tidy using the compile commands of a configured (not built)
# scratch tree. Exit 1 when something needs changing; prints what. --paths-only runs the first
# check alone.
set -uo pipefail
cd "$(dirname "$0")/.."

# A clone is the whole product: data lives in data/, nothing reaches beside the repository.
outside=$(git ls-files -co --exclude-standard -z | grep -zv '^scripts/lint\.sh$' |
          xargs -0 -r grep -In -e '\.\./shared' -- 2>/dev/null)
if [ -n "$outside" ]; then
  echo "$outside" | sed 's/^/lint: names a path outside the repository: /'
  echo "lint: use data/ (the shipped data sets) instead of a folder beside the repository"
  exit 1
fi
if [ "${1:-}" = "--paths-only" ]; then
  echo "lint: no path outside the repository"
  exit 0
fi
mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*.cc' 'src/*.h' 'tools/*.cc' \
                     'tools/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 'bench/*.h')
present=()
for f in "${files[@]}"; do [ -f "$f" ] && present+=("$f"); done
bad=0
# One clang-format for every file; only when it objects, one a file to name them.
if [ ${#present[@]} -gt 0 ] && ! clang-format --dry-run -Werror "${present[@]}" >/dev/null 2>&1; then
  for f in "${present[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "lint: $f is not clang-formatted (run: clang-format -i $f)"
      bad=1
    fi
  done
fi
if [ "${1:-}" != "--format-only" ]; then
  # build/ is a unity build (scripts/build.sh), whose database names the batches, not the files:
  # configure a scratch tree without one. clang-tidy 14 knows C++23 as c++2b.
  db=$(mktemp -d)
  cmake -S . -B "$db" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=OFF >/dev/null ||
    { echo "lint: cmake could not configure $db"; rm -rf "$db"; exit 1; }
  sed -i 's/-std=c++23/-std=c++2b/g' "$db/compile_commands.json"
  for f in "${files[@]}"; do
    case "$f" in *.cc) ;; *) continue ;; esac
    out=$(clang-tidy -p "$db" --quiet "$f" 2>/dev/null | grep -E 'warning:|error:')
    if [ -n "$out" ]; then echo "$out"; bad=1; fi
  done
fi
[ -n "${db:-}" ] && rm -rf "$db"
[ $bad -eq 0 ] && echo "lint: ${#files[@]} files clean"
exit $bad
