"""The low-pass projection of sampled chunks (policy/chunk_smoothing.py)."""

import numpy as np
import pytest
import torch

from diffusion_policy_ros.policy.chunk_smoothing import lowpass_projection, smooth_arm_paths
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation


def _fastest_cosine(n: int) -> torch.Tensor:
    return torch.cos(torch.pi * (torch.arange(n) + 0.5) * (n - 1) / n)


def test_the_projection_is_an_orthogonal_projection_of_the_given_rank():
    p = lowpass_projection(16, 4)
    assert torch.allclose(p, p.T, atol=1e-6) and torch.allclose(p @ p, p, atol=1e-5)
    assert torch.linalg.matrix_rank(p) == 4
    # Constants pass unchanged (so it commutes with the normaliser's affine map) ...
    assert torch.allclose(p @ torch.full((16,), 0.3), torch.full((16,), 0.3), atol=1e-6)
    # ... the fastest cosine (step-to-step jitter) does not.
    assert (p @ _fastest_cosine(16)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="terms must be in 1..16"):
        lowpass_projection(16, 17)


def test_arm_columns_are_smoothed_and_the_gripper_column_is_left_as_sampled():
    t = torch.linspace(0.0, 1.0, 16)
    smooth = torch.stack([0.2 + 0.1 * torch.cos(torch.pi * (torch.arange(16) + 0.5) / 16)] * 6
                         + [torch.where(t < 0.5, 1.0, -1.0)], dim=-1)
    noisy = smooth + 0.05 * _fastest_cosine(16)[:, None]
    out = smooth_arm_paths(noisy[None], lowpass_projection(16, 3))[0]
    assert torch.allclose(out[:, :6], smooth[:, :6], atol=1e-5)
    assert torch.equal(out[:, 6], noisy[:, 6])


def test_a_policy_with_the_low_pass_returns_smooth_arm_paths(make_config, language):
    torch.manual_seed(0)
    plain = DiffusionPolicy(make_config()).eval()
    smoothed = DiffusionPolicy(make_config(chunk_lowpass_terms=3)).eval()
    # Derived from the config: checkpoints keep the same tensors either way.
    assert plain.state_dict().keys() == smoothed.state_dict().keys()
    smoothed.load_state_dict(plain.state_dict())
    rng = np.random.default_rng(0)
    history = [synthetic_observation(plain, rng) for _ in range(2)]
    runner = PolicyRunner(smoothed, device="cpu", language=language)
    chunk = torch.from_numpy(runner.predict(history, "pick up the red cube", noise=0))
    p = lowpass_projection(chunk.shape[0], 3).double()
    arm = chunk[:, :6].double()
    assert torch.allclose(p @ arm, arm, atol=1e-4)
    with pytest.raises(ValueError, match="chunk_lowpass_terms 17 > horizon 16"):
        make_config(chunk_lowpass_terms=17).validate()
