#!/usr/bin/env bash
# heartbeat.sh LABEL COMMAND...: run COMMAND, printing "LABEL: N s" every 10 s until it ends, so a
# long set-up step shows progress on a pipe as on a terminal. Exits with COMMAND's status; a
# signal to this script stops COMMAND by its PID.
set -u
label=$1
shift
"$@" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 143' INT TERM
start=$SECONDS
next=10
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  if (( SECONDS - start >= next )); then
    echo "$label: $((SECONDS - start)) s"
    next=$((next + 10))
  fi
done
wait "$pid"
