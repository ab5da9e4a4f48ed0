#!/usr/bin/env bash
# A Qwen3-235B-A22B-FP8-layout checkpoint for the relayout benchmarks (bench/relayout.sh,
# bench/write_direct.sh): hidden 4096, 64 heads, 4 KV heads of 128, 128 experts of
# moe_intermediate_size 1536, BF16 block scales on a 128 x 128 grid, an 8192-token
# vocabulary, LAYERS layers (~2.55 GB each) in one shard, written by
# tools/make_qwen3_moe_fp8.py (random FP8 codes; --zero-fp8 writes them as holes).
# Usage: bench/make_qwen235b_layout.sh OUT_DIR LAYERS [--zero-fp8]
set -euo pipefail
OUT=${1:?usage: make_qwen235b_layout.sh OUT_DIR LAYERS [--zero-fp8]}
LAYERS=${2:?usage: make_qwen235b_layout.sh OUT_DIR LAYERS [--zero-fp8]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$(dirname "$OUT")"
CONFIG="$OUT.config.json"
python3 - "$CONFIG" "$LAYERS" <<'PY'
import json, sys
cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "torch_dtype": "bfloat16",
       "hidden_size": 4096, "num_hidden_layers": int(sys.argv[2]), "vocab_size": 8192,
       "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
       "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
       "mlp_only_layers": [], "tie_word_embeddings": False, "rms_norm_eps": 1e-06,
       "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}}
json.dump(cfg, open(sys.argv[1], "w"), indent=1)
PY
python3 "$ROOT/tools/make_qwen3_moe_fp8.py" "$CONFIG" "$OUT" --shard-gib 16 ${3:+"$3"} > /dev/null
rm -f "$CONFIG"
