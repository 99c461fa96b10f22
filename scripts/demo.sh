#!/usr/bin/env bash
# The main job: install what is needed, build, and run Tianshu on the shipped examples.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
T=build/tools/tianshu/tianshu

echo "== tianshu validate examples/ (clusters, engine config, jobs, scenarios, workloads)"
$T validate examples/*.yaml examples/*/*.yaml
echo
echo "== tianshu topology show examples/cluster-2048.yaml"
$T topology show examples/cluster-2048.yaml
echo
echo "== tianshu topology show lingjun (a real 3-tier Clos: data/lingjun/topo.csv)"
$T topology show lingjun
echo
echo "== tianshu plan examples/jobs/gpt3-175b.yaml on the 2048-GPU cluster"
$T plan examples/jobs/gpt3-175b.yaml --cluster examples/cluster-2048.yaml

# Side by side on real data: the Philly trace (Microsoft, 2017; data/philly/philly.csv.gz)
# replayed on 2,048 A100s under the four presets (first-fit "mainstream", Slurm-like, Tiresias,
# Tianshu).
out=build/demo
mkdir -p "$out"
echo
echo "== tianshu simulate --trace philly (four presets side by side; about ten seconds)"
$T simulate --trace philly --report "$out/philly-report.html" --jobs-csv "$out/philly-jobs.csv"
echo
echo "report: $(pwd)/$out/philly-report.html (open it in a browser); per-job rows: $(pwd)/$out/philly-jobs.csv"
echo "(the same run as JSON: add --output json)"
