#!/bin/bash
# Server outages of 30 s and 60 s (SIGKILL, then a restart on the same store) under 6 real agents
# running a 6-node job (sleep ranks, declared devices, no cgroups): after each, the nodes that
# are not ready and the job's attempt and retries. About 5 minutes; not part of the test suite
# (the suite checks the same restart grace with a 1.5 s window). Measured: docs/security.md.
#   scripts/outage-check.sh            # TIANSHU=path/to/tianshu PORT=17391 to change
set -u
B=${TIANSHU:-$(cd "$(dirname "$0")/.." && pwd)/build/tools/tianshu/tianshu}
D=$(mktemp -d /tmp/tianshu-outage.XXXX)
P=${PORT:-17391}
serve() { $B serve --listen 127.0.0.1:$P --data $D/server >> $D/server.log 2>&1 & echo $! > $D/server.pid; }
serve
for i in $(seq 1 50); do [ -f $D/server/token ] && break; sleep 0.2; done
export TIANSHU_SERVER=127.0.0.1:$P TIANSHU_TOKEN=$(cat $D/server/token)
for i in 0 1 2 3 4 5; do
  $B agent --server 127.0.0.1:$P --token-file $D/server/token --node n$i --workdir $D/a$i \
    --devices 2xA100-80GB --address 127.0.0.1 --cgroup-mode none >> $D/agent$i.log 2>&1 &
  echo $! >> $D/agents.pid
done
sleep 5
printf 'kind: training\nname: six\nmodel: {profile: llama2-7b}\ngpus: 12\ngpus_per_node: 2\nrun:\n  command: [sleep, "900"]\n' > $D/job.yaml
$B submit $D/job.yaml
for i in $(seq 1 60); do $B job j-000001 -o json | grep -q '"state": "running"' && break; sleep 1; done
$B jobs
for outage in 30 60; do
  kill -9 $(cat $D/server.pid); t0=$(date +%s)
  sleep $outage
  serve
  sleep 75
  ready=$($B nodes -o json | grep -c '"state": "ready"')
  lost=$($B nodes -o json | grep -c '"state": "lost"')
  job=$($B job j-000001 -o json)
  echo "outage ${outage}s: nodes ready $ready lost $lost; job state $(echo "$job" | grep -o '"state": "[a-z]*"' | head -1) attempt $(echo "$job" | grep -o '"attempt": [0-9]*') retries $(echo "$job" | grep -o '"retries": [0-9]*')"
done
kill $(cat $D/agents.pid) $(cat $D/server.pid) 2>/dev/null
sleep 1
for f in $D/a*/journal.jsonl; do grep -o '"pid":[0-9]*' $f | cut -d: -f2 | while read p; do [ "$p" -gt 0 ] && kill -9 -$p 2>/dev/null; done; done
echo "logs in $D"
