#!/usr/bin/env bash
# The quick-start demo: the word count, end to end and exactly once, on local Spark.
# Runs against a throw-away storage root under .demo/ (override with STREAMS_ROOT).
set -euo pipefail
export STREAMS_ROOT="${STREAMS_ROOT:-$(pwd)/.demo/storage}"
STATE_DIR="$(pwd)/.demo/state"
rm -rf "$STREAMS_ROOT" "$STATE_DIR"

echo "== storage root: $STREAMS_ROOT"
echo "== the topology"
streams-eos describe examples/wordcount.py

echo "== producing 5000 lines to text-lines and counting their words (exactly_once_v2)"
streams-eos run examples/wordcount.py --generate 5000 --until-idle \
  --config "state.dir=$STATE_DIR" --config commit.interval.ms=200

echo "== input consumed (log-end offsets of text-lines)"
streams-eos get-offsets --topic text-lines --time -1

echo "== top 10 words (latest count per word in word-counts-out)"
streams-eos console-consume --topic word-counts-out --from-beginning --timeout-ms 1000 \
  --property print.key=true --value-deserializer long |
  sort -t$'\t' -k2,2nr | awk -F'\t' '!seen[$1]++' | head -10

echo "== transactions of the application (one per micro-batch, all committed)"
streams-eos transactions --list

echo "== the application, from storage (instances, threads, lag, transactions, stores)"
streams-eos status --application-id wordcount

echo "== the committed count of 'stream', read from the word-counts store (interactive query)"
streams-eos state --application-id wordcount --store word-counts --key stream
