#!/usr/bin/env bash
# Two (or more) Voltaic processes on one Postgres database and one NATS, on this host: the cluster
# mode of README "Several processes", started with every variable each process needs.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/voltaic scripts/cluster.sh
#
# Settings (environment):
#   DATABASE_URL   an existing Postgres database, shared by the processes (required)
#   NATS_URL       a NATS server with JetStream; unset: one is started here (nats-server on NATS_PORT, 4222)
#   PROCESSES      how many Voltaic processes (2)
#   HTTP_BASE, MQTT_BASE, MQTT_WS_BASE, COAP_BASE
#                  process i (0, 1, …) listens on base + i: 8080, 1883, 3000, 5683 by default
#   HOST           bind address of every listener (0.0.0.0); CLUSTER_HOST: how the processes reach each
#                  other (127.0.0.1 here: all on this host)
#   LOG_DIR        each process's log, voltaic-<i>.log (./data/cluster)
# Any other Voltaic variable (TLS_CERT_FILE, LOG_LEVEL, …) is passed to every process.
# Ctrl-C (or SIGTERM to this script) stops them all, each draining what it was writing.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${DATABASE_URL:?set DATABASE_URL to an existing Postgres database (postgres://user@host:5432/db)}"
PROCESSES="${PROCESSES:-2}"
HTTP_BASE="${HTTP_BASE:-8080}"
MQTT_BASE="${MQTT_BASE:-1883}"
MQTT_WS_BASE="${MQTT_WS_BASE:-3000}"
COAP_BASE="${COAP_BASE:-5683}"
LOG_DIR="${LOG_DIR:-./data/cluster}"
export HOST="${HOST:-0.0.0.0}"
export CLUSTER_HOST="${CLUSTER_HOST:-127.0.0.1}"
export DATABASE_URL
mkdir -p "$LOG_DIR"

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

if [ -z "${NATS_URL:-}" ]; then
  NATS_PORT="${NATS_PORT:-4222}"
  command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || { echo "cluster: set NATS_URL, or install nats-server" >&2; exit 1; }
  NATS_BIN="$(command -v nats-server || echo /usr/sbin/nats-server)"
  "$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$LOG_DIR/nats" >"$LOG_DIR/nats.log" 2>&1 &
  pids+=("$!")
  export NATS_URL="nats://127.0.0.1:$NATS_PORT"
  echo "cluster: nats-server on $NATS_URL (log $LOG_DIR/nats.log)"
fi
export NATS_URL

node scripts/build.mjs --if-needed
flags="$(node -p "require('./package.json').config.nodeFlags")"

for ((i = 0; i < PROCESSES; i++)); do
  # shellcheck disable=SC2086 # the flags are words
  PORT=$((HTTP_BASE + i)) MQTT_PORT=$((MQTT_BASE + i)) MQTT_WS_PORT=$((MQTT_WS_BASE + i)) COAP_PORT=$((COAP_BASE + i)) \
    node $flags dist/src/main.js >"$LOG_DIR/voltaic-$i.log" 2>&1 &
  pids+=("$!")
  echo "cluster: voltaic $i (pid $!): http $((HTTP_BASE + i)), mqtt $((MQTT_BASE + i)), mqtt-ws $((MQTT_WS_BASE + i)), coap $((COAP_BASE + i)); log $LOG_DIR/voltaic-$i.log"
done
echo "cluster: Ctrl-C stops them all"
# Ends when any process ends (a start-up failure is in its log); the trap stops the others.
wait -n
echo "cluster: a process ended; stopping the others" >&2
exit 1
