#!/usr/bin/env bash
# `make run`: start exo-node on this machine with the embedded default config
# (every real device plus two simulated ones), show what it found, place an
# example model over a heterogeneous cluster, and stop.
# EXO_RUN_SECONDS=0 keeps the node running until Ctrl-C.
set -euo pipefail
BUILD=${1:-build}
NODE="$BUILD/runtime/node/exo-node"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
SECONDS_TO_RUN=${EXO_RUN_SECONDS:-5}

echo "== exo-node --devices (discover and verify every device) =="
"$NODE" --devices --config config/single-node.json
echo
if [ -f config/placement/three_nodes.json ]; then
  echo "== exo-node plan (placement of an 80-layer model on 3 nodes) =="
  "$NODE" plan --problem config/placement/three_nodes.json || true
  echo
fi
echo "== exo-node --config config/single-node.json =="
if [ "$SECONDS_TO_RUN" = "0" ]; then
  exec "$NODE" --config config/single-node.json
fi
"$NODE" --config config/single-node.json &
pid=$!
sleep "$SECONDS_TO_RUN"
kill -TERM "$pid"
wait "$pid"

# The workload (issue 5): a small local cluster of two exo-node processes on
# 127.0.0.1 with a generated test model; the coordinator places a prompt over
# both (cpu, vulkan and simulated devices), the other node receives the model in
# verified chunks, and the console prints placement, text and tokens/s.
echo
echo "== a prompt across a local cluster of two exo-node processes =="
WORK=$(mktemp -d /tmp/exo-run-XXXXXX)
CERT="$BUILD/runtime/tools/exo-cert"
CONSOLE="$BUILD/runtime/console/exo-console"
"$BUILD/runtime/tools/exo-model" make-test --out "$WORK/model.gguf" \
  --layers 8 --dim 256 --ff 768 --heads 8 --kv-heads 4 --vocab 1024 >/dev/null
"$CERT" init-ca --dir "$WORK/ca" >/dev/null
"$CERT" issue-client --ca-dir "$WORK/ca" --name ops --out "$WORK/ops" >/dev/null
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
seed_port=""
for n in alpha beta; do
  "$CERT" issue-node --ca-dir "$WORK/ca" --name "$n" --out "$WORK/$n" >/dev/null
  seeds="[]"
  include='["vulkan", "cpu"]'
  [ "$n" = beta ] && include='["cpu", "sim"]'
  [ -n "$seed_port" ] && seeds="[\"127.0.0.1:$seed_port\"]"
  cat >"$WORK/$n.json" <<JSON
{"node": {"name": "$n", "state_dir": "$WORK/$n/state"},
 "network": {"port": 0, "seeds": $seeds},
 "tls": {"certificate": "$WORK/$n/$n.crt", "key": "$WORK/$n/$n.key",
         "ca": "$WORK/$n/ca.crt"},
 "models": {"dirs": ["$WORK"]},
 "devices": {"include": $include, "cpu_bind_threads": false,
             "simulated": [{"profile": "adreno-740"}], "rescan_interval_s": 0}}
JSON
  "$NODE" --config "$WORK/$n.json" >"$WORK/$n.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 120); do
    grep -q "ready in" "$WORK/$n.log" 2>/dev/null && break
    sleep 0.25
  done
  port=$(sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$WORK/$n.log")
  [ -z "$seed_port" ] && seed_port=$port
done
con() {
  "$CONSOLE" --connect "127.0.0.1:$seed_port" --cert "$WORK/ops/ops.crt" \
    --key "$WORK/ops/ops.key" --ca "$WORK/ca/ca.crt" --timeout-ms 60000 \
    --token-file "$WORK/alpha/state/access/admin.token" --exec "$1"
}
for _ in $(seq 1 40); do
  con nodes 2>/dev/null | grep -q beta && break
  sleep 0.25
done
con "run --model $WORK/model.gguf --prompt \"Once upon a time\" -n 32 --stages 4 --seed 1 --temperature 0.8"

# Real models (issue 19): a chat exchange on a generated Q4_K_M model with a
# Llama 3 vocabulary, special tokens and a chat template in Llama 3's format,
# its Q4_K/Q6_K stages run as stored on the cpu, Vulkan and simulated
# devices of both nodes. The weights are random, so the reply is noise.
echo
echo "== a chat exchange on a generated Llama-3-vocabulary Q4_K_M model =="
echo "(random weights: the reply is noise; the template, the special tokens and"
echo " the quantized stages are real)"
"$BUILD/runtime/tools/exo-model" make-test --out "$WORK/chat.gguf" \
  --type q4_k_m --tokenizer llama3 --layers 4 --dim 256 --ff 768 --heads 8 \
  --kv-heads 4 --vocab 2048 >/dev/null
"$BUILD/runtime/tools/exo-model" info "$WORK/chat.gguf" | grep -E "^(tensor types|tokenizer|chat template)" || true
con "run --model $WORK/chat.gguf --chat --system \"You are a helpful assistant.\" --prompt \"What is exo?\" -n 24 --stages 3 --seed 1 --temperature 0.8"
cleanup
wait 2>/dev/null || true
trap - EXIT
