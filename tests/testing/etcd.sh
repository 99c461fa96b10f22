#!/usr/bin/env bash
# A real etcd cluster on loopback for the tests (CTest fixtures, the HA test), from Debian's
# etcd-server.
#   tests/testing/etcd.sh start DIR [MEMBERS]   starts MEMBERS (1) members on free ports; writes
#                                               DIR/endpoints (host:port,... of the clients) and
#                                               DIR/mN.pid of each member
#   tests/testing/etcd.sh restart DIR N         starts member N again (after a test killed it)
#   tests/testing/etcd.sh stop DIR              stops them and removes DIR
# Members run with --max-txn-ops and --max-request-bytes raised as docs/operations.md asks.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|restart|stop DIR [MEMBERS|N]" >&2; exit 2; }

# $1 distinct free loopback ports (all bound at once, so none is handed out twice).
free_ports() {
  /usr/bin/python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# Starts member $1 from its script: its own session, and no pipe of the caller's kept open
# (CTest waits for those to close).
launch() {
  setsid bash "$dir/m$1.sh" </dev/null >>"$dir/m$1.out" 2>&1 &
  echo $! >"$dir/m$1.pid"
}

healthy() {
  for _ in $(seq 1 100); do
    if curl -fsS "http://$(cat "$dir/m$1.endpoint")/health" 2>/dev/null | grep -q '"true"'; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

case "$cmd" in
  start)
    members=${3:-1}
    etcd=$(command -v etcd || true)
    [ -n "$etcd" ] || { echo "etcd.sh: no etcd binary (scripts/install-deps.sh installs etcd-server)" >&2; exit 1; }
    rm -rf "$dir"
    mkdir -p "$dir"
    declare -a cport pport
    cluster=""
    read -r -a ports <<<"$(free_ports $((2 * members)))"
    for i in $(seq 1 "$members"); do
      cport[$i]=${ports[$((2 * i - 2))]}
      pport[$i]=${ports[$((2 * i - 1))]}
      cluster+="${cluster:+,}m$i=http://127.0.0.1:${pport[$i]}"
    done
    endpoints=""
    for i in $(seq 1 "$members"); do
      # Each member's command in a script of its own, so that `restart` can run it again.
      {
        printf 'exec %q --name m%s --data-dir %q' "$etcd" "$i" "$dir/m$i"
        printf ' --listen-client-urls http://127.0.0.1:%s' "${cport[$i]}"
        printf ' --advertise-client-urls http://127.0.0.1:%s' "${cport[$i]}"
        printf ' --listen-peer-urls http://127.0.0.1:%s' "${pport[$i]}"
        printf ' --initial-advertise-peer-urls http://127.0.0.1:%s' "${pport[$i]}"
        printf ' --initial-cluster %q --initial-cluster-state new' "$cluster"
        printf ' --max-txn-ops 4096 --max-request-bytes 33554432'
        printf ' --auto-compaction-retention 1 --logger zap --log-outputs %q\n' "$dir/m$i.log"
      } >"$dir/m$i.sh"
      echo "127.0.0.1:${cport[$i]}" >"$dir/m$i.endpoint"
      launch "$i"
      endpoints+="${endpoints:+,}127.0.0.1:${cport[$i]}"
    done
    # A member answers healthy once a quorum has formed.
    for i in $(seq 1 "$members"); do
      healthy "$i" || { echo "etcd.sh: m$i did not become healthy; its log:" >&2; tail -20 "$dir/m$i.log" >&2; exit 1; }
    done
    echo "$endpoints" >"$dir/endpoints"
    echo "etcd.sh: $members member(s) at $endpoints"
    ;;
  restart)
    i=${3:?member number}
    launch "$i"
    healthy "$i" || { echo "etcd.sh: m$i did not come back; its log:" >&2; tail -20 "$dir/m$i.log" >&2; exit 1; }
    echo "etcd.sh: m$i is back"
    ;;
  stop)
    for p in "$dir"/m*.pid; do
      [ -e "$p" ] || continue
      kill "$(cat "$p")" 2>/dev/null || true
    done
    sleep 0.2
    for p in "$dir"/m*.pid; do
      [ -e "$p" ] || continue
      kill -9 "$(cat "$p")" 2>/dev/null || true
    done
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|restart|stop DIR [MEMBERS|N]" >&2
    exit 2
    ;;
esac
