#!/usr/bin/env bash
# The quick-start demo: create a topic, produce keyed lines, read them back with offsets.
# Runs against a throw-away storage root under .demo/ (override with STREAMS_ROOT).
set -euo pipefail
export STREAMS_ROOT="${STREAMS_ROOT:-$(pwd)/.demo/storage}"
rm -rf "$STREAMS_ROOT"

echo "== storage root: $STREAMS_ROOT"
streams-eos topics --create --topic sentences --partitions 3

echo "== producing 6 keyed lines (key<TAB>value)"
printf '%s\t%s\n' \
  alice "the quick brown fox" \
  bob "jumps over the lazy dog" \
  carol "exactly once, every time" \
  alice "kafka streams on spark" \
  bob "topics are delta tables" \
  carol "offsets are dense per partition" |
  streams-eos console-produce --topic sentences --property parse.key=true

echo "== topic description"
streams-eos topics --describe --topic sentences

echo "== consumed back (partition, offset, key, value); same key, same partition"
streams-eos console-consume --topic sentences --from-beginning --timeout-ms 1000 \
  --property print.partition=true --property print.offset=true --property print.key=true

echo "== log-end offsets"
streams-eos get-offsets --topic sentences --time -1
