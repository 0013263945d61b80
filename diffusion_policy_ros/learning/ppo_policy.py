"""The diffusion policy as a PPO actor: Gaussian exploration around its sampler, and a critic.

Why this form (not DPPO's chain of denoising steps): the shipped policy is a
one-step consistency student, so there is no denoising chain to treat as a
sequence of Gaussian policy steps. Instead, as for few-step flow and consistency
policies (ReinFlow's noise injection), the sampler's noise z (all draws of the
chain, stored with the sample) is a latent that does not depend on the weights,
the sampler maps it to a mean chunk mu_theta(z, o), and the action is Gaussian
around it, so log pi(a | z, o) is a Gaussian log-density whose gradient reaches the
whole denoiser (and, in the joint stage, the encoders) through mu. For a DDIM
teacher the same holds with mu the deterministic DDIM chain.

What is explored: the arm joints' paths in the policy's own low-pass basis (the
first ``chunk_lowpass_terms`` cosine terms per joint, ``policy/chunk_smoothing.py``;
every row when the policy has no low-pass), i.e. a = B^T mu_arm + std * eps and the
executed arm path B a. Every explored dimension then changes what the arm does, and
the path stays as smooth as the policy's own. Noise on all 16 x 7 entries instead
left most dimensions without any effect on the arm (the smoothing removes them)
while adding variance to every ratio, and noise on the gripper target dropped held
objects: the gripper column follows the mean (anchored by the KL term below).
Log-densities are averaged over the explored entries rather than summed, as DPPO
does, so one ratio per sample stays in a range PPO's clipping can work with.

The KL penalty towards the imitation policy is exact for two Gaussians of the same
std around means from the same z: ||mu_theta - mu_ref||^2 / (2 std^2) over the
explored coefficients, plus the same for the gripper column, with mu_ref computed
once per sample at rollout time by a frozen copy of the starting policy. Chunks are
drawn one per observation (no medoid of K: that selection has no density).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from diffusion_policy_ros.policy.activations import Mish
from diffusion_policy_ros.policy.chunk_smoothing import lowpass_basis
from diffusion_policy_ros.policy.features import STATE
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(action: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """(B,) log-density per chunk entry, averaged over the (T, D) entries."""
    z = (action.float() - mean.float()) / std
    return (-0.5 * z.square() - math.log(std) - _LOG_SQRT_2PI).mean(dim=(-2, -1))


def gaussian_entropy(std: float) -> float:
    """Entropy per action entry of N(., std^2) (nats)."""
    return 0.5 + _LOG_SQRT_2PI + math.log(std)


class ValueNetwork(nn.Module):
    """V(o): an MLP on the (detached) observation condition, the newest normalised joint
    state and the episode time, always in fp32 (autocast off), as the seed keeps its critic."""

    def __init__(self, cond_dim: int, state_dim: int, hidden: int = 256,
                 time_limit_s: float = 20.0):
        super().__init__()
        self.time_limit_s = float(time_limit_s)
        self.net = nn.Sequential(nn.Linear(cond_dim + state_dim + 1, hidden), Mish(),
                                 nn.Linear(hidden, hidden), Mish(), nn.Linear(hidden, 1))

    def forward(self, cond: torch.Tensor, state: torch.Tensor,
                elapsed_s: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=cond.device.type, enabled=False):
            x = torch.cat([cond.detach().float(), state.float(),
                           elapsed_s.float().reshape(-1, 1) / self.time_limit_s], dim=-1)
            return self.net(x).squeeze(-1)


class DiffusionActorCritic(nn.Module):
    """The policy being fine-tuned, its critic, and the explored action space."""

    arm_basis: torch.Tensor  # a buffer

    def __init__(self, policy: DiffusionPolicy, value: ValueNetwork):
        super().__init__()
        self.policy = policy
        self.value = value
        c = policy.config
        basis = (lowpass_basis(c.horizon, c.chunk_lowpass_terms) if c.chunk_lowpass_terms
                 else torch.eye(c.horizon))
        self.register_buffer("arm_basis", basis, persistent=False)

    @property
    def config(self):
        return self.policy.config

    @property
    def action_shape(self) -> tuple[int, int]:
        """(path coefficients per joint, arm joints) of the explored action."""
        return (self.arm_basis.shape[1], self.config.action_dim - 1)

    def initial_noise(self, batch: int, generator: torch.Generator,
                      device: torch.device) -> torch.Tensor:
        """(B, S, T, D): every draw the sampler needs, batch first (rollout buffer rows)."""
        return self.policy.initial_noise(batch, generator=generator, device=device).transpose(0, 1)

    def mean_chunk(self, cond: torch.Tensor, noises: torch.Tensor) -> torch.Tensor:
        """mu_theta(z, o): the sampler's normalised (B, T, D) chunk from noises (B, S, T, D)."""
        return self.policy.denoise(cond, noises.transpose(0, 1)).float()

    def arm_coefficients(self, chunk: torch.Tensor) -> torch.Tensor:
        """(B, K, D - 1): the arm columns of a normalised chunk in the explored basis."""
        return torch.einsum("tk,btd->bkd", self.arm_basis, chunk[..., :-1].float())

    def explore(self, mean_coefficients: torch.Tensor, std: float,
                generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn(mean_coefficients.shape, generator=generator,
                            device=mean_coefficients.device)
        return mean_coefficients + std * noise

    def joint_targets(self, action: torch.Tensor, mean: torch.Tensor,
                      state: torch.Tensor) -> torch.Tensor:
        """The executed (B, T, D) chunk in rad / gripper m: the arm paths of the action
        coefficients, the gripper column of the mean chunk."""
        arm = torch.einsum("tk,bkd->btd", self.arm_basis, action)
        return self.policy.to_joint_targets(torch.cat([arm, mean[..., -1:].float()], dim=-1),
                                            state)

    def kl_to_reference(self, mean: torch.Tensor, reference_mean: torch.Tensor,
                        std: float) -> torch.Tensor:
        """(B,) per-entry KL to the reference over the explored coefficients and the gripper."""
        diff = mean.float() - reference_mean.float()
        entries = torch.cat([self.arm_coefficients(diff).flatten(1), diff[..., -1]], dim=1)
        return (entries.square() / (2.0 * std ** 2)).mean(dim=1)

    def state_features(self, state: torch.Tensor) -> torch.Tensor:
        """The newest joint state (B, To, D) normalised, for the critic."""
        return self.policy.normalizer.normalize(STATE, state[:, -1].float())
