"""``num_samples``: K chunks per observation in one batch, the medoid returned."""

from __future__ import annotations

import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy


def test_one_sample_is_the_plain_sampler_and_k_returns_the_medoid_draw(make_config,
                                                                       make_batch):
    policy = DiffusionPolicy(make_config()).eval()
    batch = make_batch(policy.config, 2, with_action=False)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    cond = policy.encode_observation(batch)
    single = policy.normalizer.unnormalize(keys.ACTION, policy.sample(cond, 2, g()))
    torch.testing.assert_close(policy.predict_action_chunk(batch, 2, g()), single)

    k = 5
    draws = policy.sample(cond.repeat_interleave(k, dim=0), 2, g()).unflatten(0, (2, k))
    chunk = policy.predict_action_chunk(batch, 2, g(), num_samples=k)
    normalised = policy.normalizer.normalize(keys.ACTION, chunk)
    for b in range(2):
        distances = [(draws[b] - draws[b, j]).abs().sum() for j in range(k)]
        medoid = min(range(k), key=lambda j: distances[j])
        torch.testing.assert_close(normalised[b], draws[b, medoid], atol=1e-5, rtol=0)


def test_the_medoid_rejects_an_outlier_draw(make_config, make_batch, monkeypatch):
    policy = DiffusionPolicy(make_config()).eval()
    batch = make_batch(policy.config, 1, with_action=False)
    t, d = policy.config.horizon, policy.config.action_dim
    draws = torch.stack([torch.full((t, d), v) for v in (0.10, 0.12, 0.11, 0.9)])
    monkeypatch.setattr(policy, "denoise", lambda cond, *args: draws.clone())
    chunk = policy.predict_action_chunk(batch, num_samples=4)
    torch.testing.assert_close(policy.normalizer.normalize(keys.ACTION, chunk)[0], draws[2])
