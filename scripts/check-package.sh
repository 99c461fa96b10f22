#!/usr/bin/env bash
# Checks a built package as an operator would meet it:
#  1. lintian reports no error;
#  2. the binary extracted into a scratch root, with no source tree reachable, simulates the
#     shipped Philly trace and validates the shipped examples from /usr/share/tianshu;
#  3. as root with dpkg: a real install creates the tianshu user and a private token, its
#     systemd units pass `systemd-analyze verify` as installed (verify needs the host's unit
#     tree and the unit's binary in place), an upgrade keeps the operator's settings and the
#     token, and a purge removes what it made.
# Prints one line per check and exits 1 on the first failure.
#   scripts/check-package.sh dist/tianshu_0.1.0-1_amd64.deb
set -euo pipefail
deb=$(readlink -f "$1")
fail() { echo "check-package: FAIL: $*" >&2; exit 1; }
ok() { echo "check-package: ok: $*"; }

# 1. lintian: errors fail; warnings are listed for the record.
if ! command -v lintian >/dev/null; then fail "lintian is not installed (scripts/install-deps.sh)"; fi
lint=$(lintian --allow-root --tag-display-limit 0 "$deb" 2>&1 || true)
echo "$lint" | sed 's/^/  lintian: /' | grep -v '^  lintian: $' || true
if echo "$lint" | grep -q '^E: '; then fail "lintian reports errors"; fi
ok "lintian: $(echo "$lint" | grep -c '^E: ' || true) errors, $(echo "$lint" | grep -c '^W: ' || true) warnings"

# 2. extracted into a scratch root under /tmp: nothing above it holds a data/ folder.
root=$(mktemp -d /tmp/tianshu-pkg-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
units=("$root"/lib/systemd/system/tianshu-*.service)
[ ${#units[@]} -eq 2 ] || fail "expected 2 units, found ${#units[@]}"
# The agent's ranks open the accelerators and RDMA devices: nothing in its unit may set a device
# policy (systemd.exec: PrivateDevices and ProtectClock imply one) or hide kernel modules.
agent_unit="$root/lib/systemd/system/tianshu-agent.service"
bad=$(grep -nE '^(PrivateDevices|ProtectClock|DeviceAllow|DevicePolicy|ProtectKernelModules|ProtectHome|NoNewPrivileges)=' "$agent_unit" || true)
[ -z "$bad" ] || fail "tianshu-agent.service would keep ranks from their devices: $bad"
grep -q '^Delegate=yes' "$agent_unit" || fail "tianshu-agent.service does not delegate its cgroup"
ok "agent unit: no device policy, cgroup delegated"

bin="$root/usr/bin/tianshu"
share="$root/usr/share/tianshu"
[ -x "$bin" ] || fail "no usr/bin/tianshu in the package"
# The binary names no build path: it finds its data beside it (/usr/share/tianshu), never in the
# tree it was built from.
src_root=$(cd "$(dirname "$0")/.." && pwd)
if grep -qF "$src_root" "$bin"; then fail "usr/bin/tianshu holds the build path $src_root"; fi
ok "extracted binary: holds no build path"
run() { (cd "$root" && env -u TIANSHU_DATA "$@"); }
sim=$(run "$bin" simulate --trace philly --config tianshu --max-jobs 2000 --no-progress --output json) ||
  fail "extracted tianshu simulate --trace philly"
jobs=$(echo "$sim" | /usr/bin/python3 -c 'import json,sys; c=json.load(sys.stdin)["configs"][0]
print(c["jobs_completed"] + c["jobs_unfinished"] + c["jobs_failed"])') ||
  fail "simulate's JSON has no job counts"
[ "$jobs" = 2000 ] || fail "simulate replayed $jobs jobs, expected 2000"
ok "extracted binary: simulate --trace philly (2000 jobs) read $share/data"
(cd "$share" && env -u TIANSHU_DATA "$bin" validate examples/*.yaml examples/*/*.yaml >/dev/null) ||
  fail "extracted tianshu validate $share/examples"
ok "extracted binary: validate $(cd "$share" && ls examples/*.yaml examples/*/*.yaml | wc -l) shipped examples"
run "$bin" topology show lingjun --output json >/dev/null || fail "extracted topology show lingjun"
ok "extracted binary: topology show lingjun"

# 3. A real install, upgrade and purge (root only; skipped where the package is installed
# for real already, so an operator's install is never touched).
if [ "$(id -u)" -ne 0 ]; then echo "check-package: skipped install test (not root)"; exit 0; fi
if dpkg-query -W -f='${Status}' tianshu 2>/dev/null | grep -q "install ok installed"; then
  echo "check-package: skipped install test (tianshu is installed on this machine)"; exit 0
fi
# Never touch an operator's files: a source install may use these paths too.
for p in /etc/tianshu /var/lib/tianshu /var/lib/tianshu-agent /usr/bin/tianshu; do
  if [ -e "$p" ]; then echo "check-package: skipped install test ($p exists)"; exit 0; fi
done
# Where systemd runs (a real host, not a container), installing would start the server on
# port 7070: only when asked.
if [ -d /run/systemd/system ] && [ "${TIANSHU_PACKAGE_INSTALL_TEST:-}" != 1 ]; then
  echo "check-package: skipped install test (systemd is running here; TIANSHU_PACKAGE_INSTALL_TEST=1 runs it)"
  exit 0
fi
trap 'dpkg --purge tianshu >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
dpkg -i "$deb" >/dev/null || fail "dpkg -i"
getent passwd tianshu >/dev/null || fail "no tianshu user after install"
[ "$(stat -c '%U:%G %a' /etc/tianshu/token)" = "root:tianshu 640" ] ||
  fail "token is $(stat -c '%U:%G %a' /etc/tianshu/token), expected root:tianshu 640"
[ "$(wc -c < /etc/tianshu/token)" -ge 64 ] || fail "token shorter than 32 bytes of hex"
[ "$(stat -c '%U:%G %a' /var/lib/tianshu)" = "tianshu:tianshu 750" ] || fail "state directory"
out=$(systemd-analyze verify /lib/systemd/system/tianshu-server.service \
  /lib/systemd/system/tianshu-agent.service 2>&1) || fail "systemd-analyze verify: $out"
# It has nothing to say about clean units.
if echo "$out" | grep -q 'tianshu-'; then fail "systemd-analyze verify: $out"; fi
ok "systemd-analyze verify: tianshu-server.service tianshu-agent.service (installed)"
token=$(cat /etc/tianshu/token)
echo 'TIANSHU_SERVE_OPTS="--listen 127.0.0.1:7171"  # operator' > /etc/tianshu/server.env
dpkg -i "$deb" >/dev/null || fail "dpkg -i (upgrade)"
grep -q '# operator' /etc/tianshu/server.env || fail "upgrade replaced the operator's server.env"
[ "$(cat /etc/tianshu/token)" = "$token" ] || fail "upgrade changed the token"
/usr/bin/tianshu validate /etc/tianshu/engine.yaml >/dev/null || fail "installed engine.yaml"
ok "install: user tianshu, token 0640 root:tianshu, upgrade keeps server.env and the token"
# Removed and installed again (the config-files state): the units come back unmasked.
dpkg -r tianshu >/dev/null || fail "dpkg -r"
[ -e /etc/tianshu/token ] || fail "remove (not purge) deleted the token"
dpkg -i "$deb" >/dev/null || fail "dpkg -i (after remove)"
for u in tianshu-server tianshu-agent; do
  [ "$(readlink -f /etc/systemd/system/$u.service 2>/dev/null)" != /dev/null ] ||
    fail "$u.service is still masked after remove and install"
done
[ "$(cat /etc/tianshu/token)" = "$token" ] || fail "reinstall changed the token"
ok "remove then install: units unmasked, token kept"
dpkg --purge tianshu >/dev/null || fail "dpkg --purge"
[ ! -e /etc/tianshu/token ] && [ ! -e /var/lib/tianshu ] && [ ! -e /usr/bin/tianshu ] ||
  fail "purge left files behind"
ok "purge: token, state and binary removed"
