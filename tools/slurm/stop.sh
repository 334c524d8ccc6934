#!/usr/bin/env bash
# Stop the one-node cluster tools/slurm/start.sh started (only the daemons whose pid files it wrote).
DIR=${SLURM_LOCAL_DIR:-/tmp/parlai-empathy-slurm}
quiet=${1:-}
stop() {  # pid file, name
  [ -s "$1" ] || return 0
  pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    [ "$quiet" = --quiet ] || echo "stopped $2 ($pid)"
  fi
  rm -f "$1"
}
stop "$DIR/slurmd.pid" slurmd
stop "$DIR/slurmctld.pid" slurmctld
stop "$DIR/munge/munged.pid" munged
