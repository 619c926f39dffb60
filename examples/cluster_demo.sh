#!/usr/bin/env bash
# The word count on a Spark standalone cluster: a master and two workers started here as
# processes of their own, from the pyspark installation, and the job submitted to them
# with spark-submit. Each worker's executor keeps its tasks' stores in a state directory
# of its own; topics and logs live under one storage root every process reaches.
# Runs against a throw-away root under .cluster-demo/ (override with DEMO_DIR, STREAMS_ROOT).
set -euo pipefail
DEMO="${DEMO_DIR:-$(pwd)/.cluster-demo}"
export STREAMS_ROOT="${STREAMS_ROOT:-$DEMO/storage}"
STATE_DIR="$DEMO/state"
LINES="${LINES:-20000}"
SPARK_HOME="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
# the executors run this interpreter, which has the project installed
PYSPARK_PYTHON="$(command -v python)"
export PYSPARK_PYTHON
HOST=127.0.0.1
PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
MASTER="spark://$HOST:$PORT"
rm -rf "$DEMO"
mkdir -p "$DEMO/logs"

pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT

echo "== starting a standalone master at $MASTER and two workers (1 core, 1 GiB each)"
"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host "$HOST" --port "$PORT" --webui-port 0 >"$DEMO/logs/master.log" 2>&1 &
pids+=($!)
for n in 1 2; do
  "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker "$MASTER" \
    --host "$HOST" --cores 1 --memory 1G --webui-port 0 --work-dir "$DEMO/worker-$n" \
    >"$DEMO/logs/worker-$n.log" 2>&1 &
  pids+=($!)
done
for n in 1 2; do
  for _ in $(seq 1 120); do
    grep -q "Successfully registered with master" "$DEMO/logs/worker-$n.log" && break
    sleep 0.5
  done
  grep -q "Successfully registered with master" "$DEMO/logs/worker-$n.log" ||
    { echo "worker $n did not register: see $DEMO/logs/worker-$n.log" >&2; exit 1; }
done

echo "== producing $LINES lines and counting their words on the cluster (exactly_once_v2)"
spark-submit --master "$MASTER" --conf spark.executor.cores=1 --conf spark.cores.max=2 \
  --conf spark.executor.memory=1g \
  examples/wordcount.py --generate "$LINES" --until-idle --config "state.dir=$STATE_DIR" \
  >"$DEMO/logs/driver.log" 2>&1 || { tail -n 30 "$DEMO/logs/driver.log" >&2; exit 1; }
echo "(the run's summary: the master, the batches, and the tasks on each executor)"
grep '^{"application.id"' "$DEMO/logs/driver.log"

echo "== each executor's state directory"
ls "$STATE_DIR"

echo "== top 5 words (latest count per word in word-counts-out)"
streams-eos console-consume --topic word-counts-out --from-beginning --timeout-ms 1000 \
  --property print.key=true --value-deserializer long |
  sort -t$'\t' -k2,2nr | awk -F'\t' '!seen[$1]++' | head -5
