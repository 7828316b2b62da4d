# Shared by the benchmarks that run `exo-node run` with only its cpu
# device beside llama.cpp (batch_compare.sh, prompt_share.sh). Source it
# after setting WORK (a scratch folder), then:
#   cpu_node_config          writes $WORK/node.json: one node, cpu only
#                            (PACK_Q6_K=0: devices.cpu_pack_q6_k false)
#   stats DIGITS VALUES...   "median (min-max)" with DIGITS decimals
cpu_node_config() {
  local q6=true
  [ "${PACK_Q6_K:-1}" = 0 ] && q6=false
  cat >"$WORK/node.json" <<JSON
{"node": {"name": "bench", "state_dir": "$WORK/state"},
 "devices": {"include": ["cpu"], "rescan_interval_s": 0,
             "cpu_pack_q6_k": $q6}}
JSON
}
stats() {
  local digits=$1
  shift
  printf '%s\n' "$@" | sort -g | awk -v d="$digits" '{v[NR] = $1}
    END {f = "%." d "f"; printf f " (" f "-" f ")", v[int((NR + 1) / 2)],
         v[1], v[NR]}'
}
