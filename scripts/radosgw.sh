#!/usr/bin/env bash
# A one-node Ceph with radosgw on loopback, for the object-store tests and for trying the S3 store
# (docs/object-storage.md): a monitor, one OSD (memstore, or bluestore over a sparse file beside
# the OSD's folder) with replication 1, no manager, and radosgw's S3 API on 127.0.0.1 at a free port.
# Everything lives under one folder: configuration, daemons' data, logs, pid files, the test user.
#
#   scripts/radosgw.sh start    # creates the cluster on first use, starts what is not running, prints env
#   scripts/radosgw.sh env      # S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY lines
#   scripts/radosgw.sh status   # each daemon running or not; exit 0 only when all three run
#   scripts/radosgw.sh stop     # stops the daemons this folder's pid files name, nothing else
#
# `start` is idempotent: a second start finds the daemons running and only prints the env again.
# The env lines are KEY=value, for `set -a; eval "$(scripts/radosgw.sh env)"; set +a`.
# Environment:
#   RADOSGW_DIR        the folder, default .cache/radosgw in the repository
#   RADOSGW_OSD_STORE  memstore (default: the objects in memory, written to the folder at stop)
#                      or bluestore (an 8 GiB sparse block file)
# Needs Debian's radosgw, ceph-mon and ceph-osd (installed by .ci/run).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${RADOSGW_DIR:-$root/.cache/radosgw}")
store=${RADOSGW_OSD_STORE:-memstore}
conf=$dir/ceph.conf
# The first line of the configuration this script writes.
conf_mark='# Made by scripts/radosgw.sh'
# The Debian packages' Python, which the ceph CLI runs on too (not a pyenv shim on the PATH).
python=/usr/bin/python3
export CEPH_CONF=$conf

say() { echo "radosgw.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

need_binaries() {
  local missing=()
  for binary in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool; do
    command -v "$binary" >/dev/null || missing+=("$binary")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: apt-get install --no-install-recommends radosgw ceph-mon ceph-osd"
}

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The pid in a daemon's pid file, when that process is alive and is the daemon of this folder's
# configuration (a pid reused by another process is not ours).
running_pid() {
  local pid_file=$dir/run/$1.pid pid
  [ -s "$pid_file" ] || return 1
  pid=$(<"$pid_file")
  [ -r "/proc/$pid/cmdline" ] || return 1
  grep -qzxF -- "$conf" "/proc/$pid/cmdline" || return 1
  grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" && return 1
  echo "$pid"
}

# Waits until `$@` succeeds, at most `limit` seconds, checking every 0.2 s (a daemon's readiness
# has no event to wait on from a shell: its socket or answer is polled).
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what not ready within ${limit} s (logs in $dir/log)"
    sleep 0.2
  done
}

create_cluster() {
  local fsid mon_port rgw_port
  if [ -n "$(find "$dir" -mindepth 1 -maxdepth 1 ! -name lock -print -quit)" ]; then
    # Never a folder of someone else's files; what a creation cut short left goes (no daemon of it
    # can be running: the monitor starts once the folder is complete).
    head -n 1 "$conf" 2>/dev/null | grep -q "^$conf_mark" ||
      die "$dir is not empty and not a cluster of this script's: choose another RADOSGW_DIR"
    find "$dir" -mindepth 1 -maxdepth 1 ! -name lock -exec rm -rf {} +
  fi
  fsid=$(uuidgen)
  mon_port=$(free_port)
  rgw_port=$(free_port)
  cat >"$conf" <<EOF
$conf_mark: a one-node test cluster on loopback, authentication off.
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind msgr2 = true
auth cluster required = none
auth service required = none
auth client required = none
# With authentication off, clients (radosgw among them) hang at start without this.
ms mon client mode = crc
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
crash dir = $dir/crash
log to stderr = false
err to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1

[mon]
mon data = $dir/mon/\$id

[osd]
osd data = $dir/osd/\$id
osd objectstore = $store
osd memory target = 536870912
memstore device bytes = 2147483648
# memstore writes its objects to the OSD's folder when it unmounts, which a fast shutdown skips.
osd fast shutdown = false
# The block file sits beside the OSD's folder: bluestore's mkfs refuses one inside it.
bluestore block path = $dir/osd/block-\$id
bluestore block create = true
bluestore block size = 8589934592
bluestore fsck on mount = false

[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/rgw
rgw enable usage log = false
EOF
  mkdir -p "$dir/run" "$dir/log" "$dir/mon" "$dir/osd" "$dir/crash"
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
  echo "$rgw_port" >"$dir/rgw-port"
  touch "$dir/created"
}

start_mon() {
  running_pid mon.a >/dev/null && return
  ceph-mon -c "$conf" -i a 9>&-
  wait_for 60 "the monitor" ceph --connect-timeout 5 mon stat
}

start_osd() {
  if [ ! -f "$dir/osd/0/ready" ]; then
    local uuid id
    if [ -f "$dir/osd-uuid" ]; then uuid=$(<"$dir/osd-uuid"); else
      uuid=$(uuidgen)
      echo "$uuid" >"$dir/osd-uuid"
    fi
    # Idempotent for the same uuid: a mkfs cut short is redone with the same id.
    id=$(ceph --connect-timeout 10 osd new "$uuid")
    [ "$id" = 0 ] || die "the OSD was given id $id, not 0"
    rm -rf "$dir/osd/0" "$dir/osd/block-0"
    mkdir -p "$dir/osd/0"
    ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" 2>>"$dir/log/osd-mkfs.log" >/dev/null
    touch "$dir/osd/0/ready"
  fi
  running_pid osd.0 >/dev/null && return
  ceph-osd -c "$conf" -i 0 9>&-
  wait_for 60 "the OSD" osd_up
}

osd_up() {
  ceph --connect-timeout 5 osd dump --format json | "$python" -c \
    'import json, sys; sys.exit(0 if any(o["osd"] == 0 and o["up"] for o in json.load(sys.stdin)["osds"]) else 1)'
}

rgw_port() { cat "$dir/rgw-port"; }

rgw_answers() {
  "$python" - "$(rgw_port)" <<'EOF'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2)
except urllib.error.HTTPError:
    pass
EOF
}

start_rgw() {
  running_pid client.rgw.a >/dev/null && return
  radosgw -c "$conf" -n client.rgw.a 9>&-
  # The first start creates radosgw's pools: some 20 s on two cores.
  wait_for 120 "radosgw" rgw_answers
}

ensure_user() {
  [ -s "$dir/test-user" ] && return
  local access secret
  access=$("$python" -c 'import secrets, string; print("".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(20)))')
  secret=$("$python" -c 'import secrets; print(secrets.token_urlsafe(30))')
  radosgw-admin -c "$conf" user create --uid=test --display-name='scripts/radosgw.sh test user' \
    --access-key="$access" --secret-key="$secret" >/dev/null 2>>"$dir/log/radosgw-admin.log" ||
    die "radosgw-admin user create failed (see $dir/log/radosgw-admin.log)"
  printf '%s\n%s\n' "$access" "$secret" >"$dir/test-user.new"
  mv "$dir/test-user.new" "$dir/test-user"
}

print_env() {
  [ -s "$dir/test-user" ] || die "no cluster in $dir yet: run start"
  local access secret
  { read -r access && read -r secret; } <"$dir/test-user"
  echo "S3_ENDPOINT=http://127.0.0.1:$(rgw_port)"
  # radosgw's default zonegroup takes any region in a signature; the SDKs need one.
  echo "S3_REGION=us-east-1"
  echo "S3_ACCESS_KEY_ID=$access"
  echo "S3_SECRET_ACCESS_KEY=$secret"
}

stop_daemon() {
  local pid
  pid=$(running_pid "$1") || return 0
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while [ -e "/proc/$pid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      say "$1 (pid $pid) did not stop within 30 s: killed"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$dir/run/$1.pid"
}

# The lock's descriptor (9) is closed in every daemon started (`9>&-`): a daemon holding it would
# keep the next start or stop waiting for ever.
with_lock() {
  mkdir -p "$dir"
  exec 9>"$dir/lock"
  flock 9
}

case "${1:-}" in
  start)
    need_binaries
    with_lock
    [ -f "$dir/created" ] || create_cluster
    start_mon
    start_osd
    start_rgw
    ensure_user
    print_env
    ;;
  stop)
    [ -f "$conf" ] || exit 0
    with_lock
    stop_daemon client.rgw.a
    stop_daemon osd.0
    stop_daemon mon.a
    ;;
  status)
    [ -f "$conf" ] || {
      echo "no cluster in $dir"
      exit 3
    }
    all=0
    for daemon in mon.a osd.0 client.rgw.a; do
      if pid=$(running_pid "$daemon"); then echo "$daemon running (pid $pid)"; else
        echo "$daemon stopped"
        all=3
      fi
    done
    [ "$all" -ne 0 ] || echo "S3 endpoint http://127.0.0.1:$(rgw_port)"
    exit "$all"
    ;;
  env) print_env ;;
  *)
    echo "usage: scripts/radosgw.sh start|stop|status|env (RADOSGW_DIR, default .cache/radosgw)" >&2
    exit 2
    ;;
esac
