#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for lachesis's Slurm tests.
#
#   tests/slurm/cluster.sh          bring it up (installs slurm-wlm + munge if missing and root)
#   tests/slurm/cluster.sh stop     stop the Slurm daemons (and munged, if this script started it)
#
# Idempotent: with the cluster already up and its config unchanged it does nothing. On success
# the last stdout line is `SLURM_CONF=<path>`; when no cluster can be had it prints
# `slurm: skipped: <reason>` and exits 3. Progress goes to stderr.
#
# Environment: LACHESIS_SLURM_DIR (state dir, default ~/.cache/lachesis/slurm),
# LACHESIS_SLURM_PORT (slurmctld port; slurmd uses the next one; default 6817),
# LACHESIS_SLURM_PROCTRACK (cgroup or pgid: skip the detection, e.g. to test under pgid).
set -uo pipefail

STATE=${LACHESIS_SLURM_DIR:-$HOME/.cache/lachesis/slurm}
CTLD_PORT=${LACHESIS_SLURM_PORT:-6817}
SLURMD_PORT=$((CTLD_PORT + 1))
NODE=n1
CONF=$STATE/slurm.conf
export SLURM_CONF=$CONF
# Debian puts slurmctld, slurmd and munged in /usr/sbin, which a non-login or non-root PATH
# often lacks: look there too, after whatever the caller's PATH prefers.
for dir in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$dir:"*) ;; *) PATH=$PATH:$dir ;; esac
done
export PATH

# One at a time: every Slurm test process runs this script (nextest runs each test in a process
# of its own), and two that wrote the config side by side could each read the other's half-written
# file as a change and restart the cluster under the tests using it.
mkdir -p "$STATE"
exec 9>"$STATE/cluster.lock"
flock 9

say() { printf 'slurm: %s\n' "$*" >&2; }
skip() {
  printf 'slurm: skipped: %s\n' "$*"
  exit 3
}
# Polls `$@` every 0.1 s until it succeeds or `$1` seconds have passed.
wait_until() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
# A live process (not a zombie: in a container nobody may reap a stopped daemon).
pid_alive() {
  local pid stat
  pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
node_state() { [ -f "$CONF" ] && timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null; }
node_idle() { [ "$(node_state)" = idle ]; }
# Up and serving: idle, or running jobs (a re-run while tests use the cluster).
node_up() { case "$(node_state)" in idle | mixed | allocated | completing) true ;; *) false ;; esac; }
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

stop_pidfile() {
  local file=$1 what=$2
  if pid_alive "$file"; then
    say "stopping $what"
    kill "$(cat "$file")" 2>/dev/null
    wait_until 20 eval "! pid_alive '$file'" || {
      kill -KILL "$(cat "$file")" 2>/dev/null
      wait_until 5 eval "! pid_alive '$file'"
    }
  fi
  rm -f "$file"
}

stop_all() {
  stop_pidfile "$STATE/slurmd.pid" slurmd
  stop_pidfile "$STATE/slurmctld.pid" slurmctld
  # munged only if we started it: another user of the machine may rely on it.
  if [ -f "$STATE/munged.ours" ]; then
    stop_pidfile /run/munge/munged.pid munged
    rm -f "$STATE/munged.ours"
  fi
}

if [ "${1:-}" = stop ]; then
  stop_all
  say "stopped"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: $0 [stop]" >&2; exit 2; }

# --- Install -------------------------------------------------------------------------------
have_slurm() { command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null; }
if ! have_slurm; then
  [ "$(id -u)" = 0 ] || skip "slurm is not installed and we are not root to install it"
  command -v apt-get >/dev/null || skip "slurm is not installed and there is no apt-get"
  say "installing slurm-wlm and munge"
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge; }
  if ! apt_install >"${TMPDIR:-/tmp}/lachesis-slurm-apt.log" 2>&1; then
    apt-get update >>"${TMPDIR:-/tmp}/lachesis-slurm-apt.log" 2>&1
    apt_install >>"${TMPDIR:-/tmp}/lachesis-slurm-apt.log" 2>&1 ||
      skip "apt-get install slurm-wlm munge failed (see ${TMPDIR:-/tmp}/lachesis-slurm-apt.log)"
  fi
  have_slurm || skip "slurm-wlm installed but sbatch/slurmctld/munged are still missing"
fi
# The daemons need root here (SlurmUser=root, munged started as user munge).
[ "$(id -u)" = 0 ] || node_up || skip "the cluster is not running and starting it needs root"

mkdir -p "$STATE" || skip "cannot create $STATE"
# Daemons started below must not inherit fd 9, or they would hold the lock forever.
exec 9>"$STATE/lock"
flock -w 120 9 || skip "another cluster.sh holds $STATE/lock"

# --- Config --------------------------------------------------------------------------------
# proctrack/cgroup (cgroup v1) tracks every process of a job; where cgroups are not writable,
# fall back to proctrack/pgid. The choice is remembered so re-runs write the same config.
cgroup_writable() {
  local probe=/sys/fs/cgroup/freezer/lachesis-probe-$$
  [ -d /sys/fs/cgroup/freezer ] && mkdir "$probe" 2>/dev/null && rmdir "$probe"
}
if [ -n "${LACHESIS_SLURM_PROCTRACK:-}" ]; then
  PROCTRACK=$LACHESIS_SLURM_PROCTRACK
  case $PROCTRACK in cgroup | pgid) ;; *) skip "LACHESIS_SLURM_PROCTRACK must be cgroup or pgid" ;; esac
elif [ -s "$STATE/proctrack" ]; then
  PROCTRACK=$(cat "$STATE/proctrack")
elif cgroup_writable; then
  PROCTRACK=cgroup
else
  PROCTRACK=pgid
fi

write_config() {
  local host
  host=$(hostname -s)
  mkdir -p "$STATE/ctld" "$STATE/slurmd" "$STATE/log"
  cat >"$CONF.new" <<EOF
# Written by lachesis tests/slurm/cluster.sh; edits are overwritten.
ClusterName=lachesis
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.txt
SlurmdParameters=config_overrides
ReturnToService=2
# Ended jobs stay visible to scontrol for MinJobAge seconds, then only sacct -c knows them.
MinJobAge=600
KillWait=10
NodeName=$NODE NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$STATE/cgroup.conf.new"
  # Status 0: unchanged; 1: the files changed (running daemons must be restarted).
  local changed=1
  cmp -s "$CONF.new" "$CONF" && cmp -s "$STATE/cgroup.conf.new" "$STATE/cgroup.conf" && changed=0
  mv "$CONF.new" "$CONF"
  mv "$STATE/cgroup.conf.new" "$STATE/cgroup.conf"
  return $changed
}

# --- Daemons -------------------------------------------------------------------------------
start_munged() {
  munge_ok && return 0
  say "starting munged"
  install -d -o munge -g munge -m 0755 /run/munge
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key ||
    skip "cannot create /etc/munge/munge.key"
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  runuser -u munge -- "$(command -v munged)" >&2 9>&- || skip "munged would not start"
  touch "$STATE/munged.ours"
  wait_until 10 munge_ok || skip "munged started but munge/unmunge fail"
}

# The last error a daemon logged, for the skip line.
last_error() { grep -hE 'fatal:|error:' "$STATE/log/$1.log" 2>/dev/null | tail -n1 | cut -c1-200; }

# slurmctld failing has nothing to do with proctrack: no fallback, just say why.
start_slurmctld() {
  if ! pid_alive "$STATE/slurmctld.pid"; then
    say "starting slurmctld (proctrack/$PROCTRACK)"
    slurmctld >&2 9>&- || skip "slurmctld would not start: $(last_error slurmctld)"
  fi
  # Our slurmctld, alive: another cluster's on the same port would answer the ping too.
  wait_until 15 eval 'pid_alive "$STATE/slurmctld.pid" && timeout 5 scontrol ping 2>/dev/null | grep -q UP' ||
    skip "slurmctld did not come up: $(last_error slurmctld)"
}

start_slurmd() {
  if ! pid_alive "$STATE/slurmd.pid"; then
    say "starting slurmd"
    slurmd -N "$NODE" >&2 9>&- || return 1
  fi
  # A node left DOWN by an earlier unclean stop comes back with ReturnToService=2 once slurmd
  # registers; an explicit resume covers a DRAIN from a config change.
  wait_until 20 eval 'pid_alive "$STATE/slurmd.pid" && node_idle ||
    { scontrol update nodename=$NODE state=resume 2>/dev/null; false; }'
}

# Does a job run to the end here? (proctrack/cgroup can load yet fail at the first job.)
smoke_test() {
  timeout 30 srun -N1 -n1 -t 1 true >/dev/null 2>&1
}

config_changed=0
write_config || config_changed=1
if ((config_changed == 0)) && pid_alive "$STATE/slurmctld.pid" && pid_alive "$STATE/slurmd.pid" && node_up; then
  say "already up"
  echo "SLURM_CONF=$CONF"
  exit 0
fi
[ "$(id -u)" = 0 ] || skip "the cluster is not running and starting it needs root"
((config_changed == 0)) || stop_all
start_munged

# Up means a job ran and both daemons are still ours and alive (one that lost its port to
# another cluster dies a moment after starting, while the other cluster answers for it).
up() { start_slurmd && smoke_test && pid_alive "$STATE/slurmctld.pid" && pid_alive "$STATE/slurmd.pid"; }
cgroup_trouble() { grep -hiE 'fatal:|error:' "$STATE/log/slurmd.log" 2>/dev/null | grep -qiE 'cgroup|proctrack'; }

start_slurmctld
if up; then
  echo "$PROCTRACK" >"$STATE/proctrack"
elif [ "$PROCTRACK" = cgroup ] && [ -z "${LACHESIS_SLURM_PROCTRACK:-}" ] && cgroup_trouble; then
  say "proctrack/cgroup does not work here ($(last_error slurmd)); falling back to proctrack/pgid"
  stop_all
  PROCTRACK=pgid
  write_config
  start_munged
  start_slurmctld
  up || skip "slurmd would not run a job on node $NODE: $(last_error slurmd)"
  echo "$PROCTRACK" >"$STATE/proctrack"
else
  pid_alive "$STATE/slurmctld.pid" || skip "slurmctld exited: $(last_error slurmctld)"
  skip "slurmd would not run a job on node $NODE: $(last_error slurmd)"
fi
say "up: node $NODE idle, 8 CPUs, proctrack/$PROCTRACK"
echo "SLURM_CONF=$CONF"
