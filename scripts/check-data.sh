#!/usr/bin/env bash
# Checks the shipped data sets against the SHA-256 sums in data/README.md (of the uncompressed
# upstream files) and that each folder keeps its upstream licence. Exit 1 on any difference.
set -euo pipefail
cd "$(dirname "$0")/../data"
bad=0
n=0
while read -r sum file; do
  n=$((n + 1))
  if [ -f "$file" ]; then got=$(sha256sum < "$file" | cut -d' ' -f1)
  elif [ -f "$file.gz" ]; then got=$(gzip -dc "$file.gz" | sha256sum | cut -d' ' -f1)
  else echo "check-data: data/$file: missing (nor $file.gz)"; bad=1; continue; fi
  if [ "$got" != "$sum" ]; then echo "check-data: data/$file: sha256 $got, expected $sum"; bad=1; fi
done < <(sed -n '/^```$/,/^```$/p' README.md | grep -E '^[0-9a-f]{64}  ')
[ "$n" -ge 14 ] || { echo "check-data: only $n sums found in data/README.md"; bad=1; }
for lic in philly/LICENSE-adaptdl itp/LICENSE lingjun/LICENSE openb/TERMS.md; do
  [ -s "$lic" ] || { echo "check-data: data/$lic: missing upstream licence"; bad=1; }
done
[ $bad -eq 0 ] && echo "check-data: $n files match data/README.md"
exit $bad
