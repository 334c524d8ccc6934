#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for trying ParlAI's SLURM path (distributed_train):
# munged, slurmctld and slurmd, all listening on 127.0.0.1, with their config, keys, state and
# logs in one folder. Needs root (slurmd launches jobs as their user) and Debian's packages:
#     apt-get install --no-install-recommends slurm-wlm munge        (or: start.sh --install)
# Then use the cluster with SLURM_CONF pointing at the config this prints, e.g.
#     export SLURM_CONF=/tmp/parlai-empathy-slurm/slurm.conf; srun -n 2 hostname
# tools/slurm/stop.sh stops it. Settings (environment):
#     SLURM_LOCAL_DIR   folder for everything (default /tmp/parlai-empathy-slurm)
#     SLURM_LOCAL_CPUS  CPUs of the node (default 2)
#     SLURM_LOCAL_PORT  slurmctld port; slurmd uses the next one (default 6817)
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/tmp/parlai-empathy-slurm}
CPUS=${SLURM_LOCAL_CPUS:-2}
PORT=${SLURM_LOCAL_PORT:-6817}
HOST=$(hostname -s)
# the node's name is what jobs see in SLURM_JOB_NODELIST (ParlAI connects its workers to it):
# the host name if it resolves, else localhost
if getent hosts "$HOST" >/dev/null; then NODE=$HOST; else NODE=localhost; fi

if [ "${1:-}" = "--install" ] && ! command -v slurmctld >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
for tool in munged slurmctld slurmd scontrol; do
  command -v $tool >/dev/null || { echo "start.sh: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "start.sh: slurmd must run as root" >&2; exit 2; }

mkdir -p "$DIR"/{munge,state,spool,log}
chmod 700 "$DIR/munge"
# munge: a fresh key per cluster; its socket is given to slurm by AuthInfo below
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom bs=1 count=1024 of="$DIR/munge/munge.key" status=none
  chmod 400 "$DIR/munge/munge.key"
fi
SOCKET="$DIR/munge/munge.socket"

cat > "$DIR/slurm.conf" <<CONF
# written by tools/slurm/start.sh: one node, $CPUS CPUs, everything on 127.0.0.1
ClusterName=parlai-empathy
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# bind every daemon (and srun) to the node's address, 127.0.0.1, never to all interfaces
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=10
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

export SLURM_CONF="$DIR/slurm.conf"
"$(dirname "$0")/stop.sh" --quiet || true
munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
  --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$NODE"

# up when the node is idle (slurmd registered with slurmctld)
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
  case "$state" in idle|mix|alloc) echo "SLURM up: node $NODE ($CPUS CPUs), SLURM_CONF=$SLURM_CONF"; exit 0;; esac
  sleep 1
done
echo "start.sh: the node did not come up (state '${state:-none}'); logs in $DIR/log" >&2
tail -5 "$DIR"/log/*.log >&2 || true
exit 1
