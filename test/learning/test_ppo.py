"""PPO pieces without an environment: GAE, the clipped surrogate, the buffer, the actor."""

import math

import pytest
import torch

from diffusion_policy_ros.learning.ppo import (
    RolloutBuffer,
    clipped_policy_loss,
    explained_variance,
    gae_advantages,
    gae_advantages_loop,
    normalise_advantages,
)
from diffusion_policy_ros.learning.ppo_policy import (
    DiffusionActorCritic,
    ValueNetwork,
    gaussian_entropy,
    gaussian_log_prob,
)


def _rollout(steps, envs, seed=0, p_done=0.05, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(steps, envs, generator=g, dtype=dtype),
            torch.randn(steps, envs, generator=g, dtype=dtype),
            (torch.rand(steps, envs, generator=g) < p_done).to(dtype),
            torch.randn(envs, generator=g, dtype=dtype))


@pytest.mark.parametrize("steps,envs,p_done", [(1, 1, 0.0), (37, 3, 0.1), (300, 4, 0.02),
                                               (64, 2, 1.0), (128, 2, 0.0)])
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.5)])
def test_vectorised_gae_equals_the_loop(steps, envs, p_done, gamma, lam):
    args = (*_rollout(steps, envs, p_done=p_done), gamma, lam)
    adv, ret = gae_advantages(*args)
    ref_adv, ref_ret = gae_advantages_loop(*args)
    assert torch.allclose(adv, ref_adv, atol=1e-6, rtol=0)
    assert torch.allclose(ret, ref_ret, atol=1e-6, rtol=0)


def test_vectorised_gae_carries_across_its_blocks():
    """gamma * lambda = 0.5: blocks of 865 steps, so 3000 steps take four of them."""
    args = (*_rollout(3000, 2, p_done=0.0005), 1.0, 0.5)
    assert torch.allclose(gae_advantages(*args)[0], gae_advantages_loop(*args)[0], atol=1e-6)


def test_gae_on_a_hand_made_episode():
    # One env, two steps, the episode ends after the second: A_1 = r_1 - V_1,
    # A_0 = r_0 + g V_1 - V_0 + g l A_1.
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[0.5], [0.25]])
    dones = torch.tensor([[0.0], [1.0]])
    adv, ret = gae_advantages(rewards, values, dones, torch.tensor([100.0]), 0.9, 0.8)
    a1 = 2.0 - 0.25
    a0 = 1.0 + 0.9 * 0.25 - 0.5 + 0.9 * 0.8 * a1
    assert adv[:, 0].tolist() == pytest.approx([a0, a1])
    assert ret[:, 0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.25])


def test_clipped_loss_stops_pushing_past_the_clip():
    old = torch.zeros(4)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    new = torch.log(torch.tensor([1.5, 1.05, 0.5, 0.95])).requires_grad_(True)
    parts = clipped_policy_loss(new, old, adv, clip=0.2)
    parts["policy_loss"].backward()
    # Ratios outside [0.8, 1.2] in the advantage's direction get no gradient.
    assert new.grad[0] == 0 and new.grad[2] == 0
    assert new.grad[1] < 0 and new.grad[3] > 0
    assert float(parts["clip_fraction"]) == 0.5
    assert math.isfinite(float(parts["approx_kl"])) and float(parts["approx_kl"]) > 0


def test_gaussian_log_prob_and_entropy():
    mean = torch.zeros(3, 4, 2)
    action = torch.full((3, 4, 2), 0.2)
    std = 0.1
    expected = -0.5 * 4.0 - math.log(std) - 0.5 * math.log(2 * math.pi)
    assert gaussian_log_prob(action, mean, std).tolist() == pytest.approx([expected] * 3)
    assert gaussian_entropy(std) == pytest.approx(
        torch.distributions.Normal(0.0, std).entropy().item())


def _actor(lowpass_terms):
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

    config = DiffusionPolicyConfig(
        image_base_channels=8, image_stages=2, image_token_grid=2, norm_groups=4,
        point_feature_dim=32, point_tokens=4, fusion_dim=32, fusion_layers=1, fusion_heads=2,
        cond_dim=32, timestep_embed_dim=32, unet_base_dim=16, unet_levels=2,
        chunk_lowpass_terms=lowpass_terms)
    policy = DiffusionPolicy(config).eval()
    return DiffusionActorCritic(policy, ValueNetwork(config.cond_dim, config.state_dim))


def test_without_noise_the_actor_executes_the_policys_own_chunk():
    torch.manual_seed(0)
    ac = _actor(lowpass_terms=3)
    assert ac.action_shape == (3, 6)
    cond, state = torch.randn(2, 32), torch.randn(2, 2, 7)
    noises = ac.initial_noise(2, torch.Generator().manual_seed(1), torch.device("cpu"))
    with torch.no_grad():
        mean = ac.mean_chunk(cond, noises)
        executed = ac.joint_targets(ac.arm_coefficients(mean), mean, state)
        reference = ac.policy.chunk_from_condition(cond, state, noises.transpose(0, 1))
    torch.testing.assert_close(executed, reference)


def test_kl_to_the_reference_counts_the_explored_coefficients_and_the_gripper():
    ac = _actor(lowpass_terms=0)  # no low-pass: every row of every arm joint is explored
    assert ac.action_shape == (16, 6)
    mean = torch.zeros(1, 16, 7)
    shifted = mean.clone()
    shifted[..., 0] = 0.1  # one arm joint: 16 of the 16 * 6 + 16 entries
    std = 0.05
    assert float(ac.kl_to_reference(shifted, mean, std)) == pytest.approx(
        16 * 0.01 / (2 * std ** 2) / (16 * 6 + 16))
    assert float(ac.kl_to_reference(mean, mean, std)) == 0.0


def test_advantage_normalisation_and_explained_variance():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    z = normalise_advantages(x)
    assert float(z.mean()) == pytest.approx(0.0, abs=1e-7)
    assert float(z.std()) == pytest.approx(1.0, abs=1e-6)
    assert explained_variance(x, x) == 1.0
    assert explained_variance(torch.zeros(4), x) == pytest.approx(0.0)


def test_buffer_is_reused_and_grows_once():
    buf = RolloutBuffer({"x": ((2,), torch.float32), "done": ((), torch.float32)}, 4, 3)
    for it in range(3):
        buf.clear()
        for t in range(6):
            envs = torch.tensor([0, 2]) if t < 5 else torch.tensor([0])
            buf.put(t, envs, x=torch.full((len(envs), 2), float(t + it)),
                    done=torch.zeros(len(envs)))
        flat = buf.flat(["x"])
        assert flat["x"].shape == (11, 2)
        assert buf.steps() == 6
    assert buf.allocations == 2  # the first one, and one growth from 4 to 8 rows


def test_value_loss_falls_on_a_fixed_batch():
    torch.manual_seed(0)
    net = ValueNetwork(cond_dim=8, state_dim=3, hidden=32, time_limit_s=10.0)
    cond, state, elapsed = torch.randn(64, 8), torch.randn(64, 3), torch.rand(64, 1) * 10
    target = cond[:, 0] - 0.5 * state[:, 1] + 0.1 * elapsed[:, 0]
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        loss = 0.5 * (net(cond, state, elapsed) - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.1 * losses[0]
    # fp32 even under autocast.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert net(cond, state, elapsed).dtype == torch.float32
