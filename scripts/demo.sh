#!/usr/bin/env bash
# The main job: install what is needed, build, and run Tianshu on the shipped examples.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
T=build/tools/tianshu/tianshu

echo "== tianshu validate examples/"
$T validate examples/*.yaml examples/jobs/*.yaml
echo
echo "== tianshu topology show examples/cluster-2048.yaml"
$T topology show examples/cluster-2048.yaml
if [ -f ../shared/data/lingjun/topo.csv ]; then
  echo
  echo "== tianshu topology show ../shared/data/lingjun/topo.csv (a real 3-tier Clos)"
  $T topology show ../shared/data/lingjun/topo.csv
fi
