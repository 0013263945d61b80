#!/usr/bin/env bash
# The checks that need an accelerator (CUDA or an Ascend NPU), which CI has not:
# the shipped policy on it against the CPU (fp32, bf16, fp16), the PPO update on it
# (bf16 policy, fp32 critic, both stages), and `dpr bench policy` there for the
# teacher (DDIM-100 / DDIM-10) and the shipped one-step student, K = 1 and 8.
#
#   scripts/accelerator_check.sh [OUT_DIR] [LANGUAGE_CACHE_JSON]
#
# PYTHON picks the interpreter (default .venv/bin/python). LANGUAGE_CACHE_JSON: the
# instruction embeddings for a host without the sentence model (LanguageEmbedder's cache).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/accelerator}
cache=${2:-}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
rm -f "$out/policy_tables.md"
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' | tee "$out/device.txt"
status=0
"$python" -m pytest -q -rA -s -p no:cacheprovider test/policy/test_accelerator.py \
  test/learning/test_ppo_accelerator.py 2>&1 | tee "$out/tests.log" || status=1
bench() {  # name, checkpoint config, bench options...; a checkpoint not here is skipped
  local name=$1 config=$2
  shift 2
  if [[ ! -f "$(dirname "$config")/model.safetensors" ]]; then
    echo "$name: $(dirname "$config")/model.safetensors is not here, not benchmarked" \
      | tee -a "$out/policy_tables.md"
    return
  fi
  for precision in fp32 bf16; do
    "$python" -m diffusion_policy_ros.bench.policy_stages --device auto --config "$config" \
      --precision "$precision" --repeats 50 ${cache:+--language-cache "$cache"} \
      --json "$out/policy_${name}_${precision}.json" "$@" | tee -a "$out/policy_tables.md"
  done
}
bench teacher checkpoints/grasp_unet/config.json --steps 100 10 --samples 1 8
bench student checkpoints/grasp_unet_cd32/config.json --steps 1 --samples 1 8
exit $status
