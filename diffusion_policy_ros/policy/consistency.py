"""Consistency models on the policy's DDPM schedule: the student's parameterisation,
the teacher's DDIM solver step, and multistep consistency sampling.

A consistency function maps any point x_t of the teacher's probability-flow ODE
trajectory to that trajectory's clean end x_0 (Song et al., 2023). The student
keeps the teacher's denoiser (its raw output read as the teacher's prediction
type) and wraps it in EDM's boundary parameterisation on the clean-chunk
estimate::

    f(x_t, t) = c_skip(t) * x_t + c_out(t) * x0_hat(x_t, t)

    c_skip = s_d^2 / (u^2 + s_d^2),  c_out = u / sqrt(u^2 + s_d^2),  u = s - s_min

with ``s = sqrt(1 - abar_t) / sqrt(abar_t)`` (the noise level of x_t read as data
+ s * noise), ``s_min`` that of the smallest time on the grid, and ``s_d`` =
``consistency_sigma_data``. At the grid's first time c_skip = 1 and c_out = 0, so
f is the identity there by construction (the boundary condition). c_out tends to 1
(not EDM's s_d) because the wrapped quantity is already a clean-chunk estimate, as
in latent consistency models: a student initialised from the teacher starts as the
teacher's one-step x0 estimate at high noise.

Times live on a grid of every ``consistency_skip``-th DDPM timestep (0, k, 2k, ...),
which is where the teacher's DDIM solver hops during distillation and where
sampling evaluates the student. ``sampling_timesteps(n)`` spreads n evaluations
over the grid from its top (the teacher's DDIM start) down.
"""

from __future__ import annotations

import torch

from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.schedulers import make_training_scheduler


class ConsistencySchedule:
    """The DDPM noise levels of one policy config and the consistency time grid."""

    def __init__(self, config: DiffusionPolicyConfig):
        self.prediction_type = config.prediction_type
        self.clip_range = config.clip_sample_range if config.clip_sample else None
        self.sigma_data = config.consistency_sigma_data
        self.alphas_cumprod = make_training_scheduler(config).alphas_cumprod.float()
        skip = config.consistency_skip
        # Top of the grid = where the teacher's DDIM ("leading" spacing) starts.
        self.grid_times = range(0, config.num_train_timesteps, skip)
        self.grid = torch.tensor(self.grid_times, dtype=torch.long)
        self.skip = skip
        self.sigma_min = float(self.sigma(self.grid[:1])[0])

    def to(self, device: torch.device | str) -> ConsistencySchedule:
        self.alphas_cumprod = self.alphas_cumprod.to(device)
        self.grid = self.grid.to(device)
        return self

    def _abar(self, t: torch.Tensor) -> torch.Tensor:
        return self.alphas_cumprod.to(t.device)[t.long()]

    def sigma(self, t: torch.Tensor) -> torch.Tensor:
        abar = self._abar(t)
        return (1.0 - abar).sqrt() / abar.sqrt()

    def boundary_scalings(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(c_skip, c_out) at timesteps ``t`` (B,)."""
        s = self.sigma(t) - self.sigma_min
        sd2 = self.sigma_data ** 2
        return sd2 / (s ** 2 + sd2), s / (s ** 2 + sd2).sqrt()

    def x0_estimate(self, output: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                    clip: bool = False) -> torch.Tensor:
        """The denoiser's clean-chunk estimate from its raw ``output`` at x_t."""
        if self.prediction_type == "sample":
            x0 = output
        else:
            abar = self._abar(t).view(-1, 1, 1)
            x0 = (x - (1.0 - abar).sqrt() * output) / abar.sqrt()
        if clip and self.clip_range is not None:
            x0 = x0.clamp(-self.clip_range, self.clip_range)
        return x0

    def consistency(self, output: torch.Tensor, x: torch.Tensor,
                    t: torch.Tensor) -> torch.Tensor:
        """f(x_t, t) from the denoiser's raw ``output`` (B, T, D) at timesteps ``t`` (B,)."""
        c_skip, c_out = self.boundary_scalings(t)
        return (c_skip.view(-1, 1, 1) * x
                + c_out.view(-1, 1, 1) * self.x0_estimate(output, x, t))

    def ddim_step(self, output: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                  t_prev: torch.Tensor) -> torch.Tensor:
        """One deterministic DDIM step (eta = 0) from t to t_prev (B,), batched over times.

        The teacher's solver as diffusers' ``DDIMScheduler.step`` computes it: the clean
        estimate is clipped, the noise direction comes from the unclipped prediction.
        """
        abar, abar_prev = self._abar(t).view(-1, 1, 1), self._abar(t_prev).view(-1, 1, 1)
        x0 = self.x0_estimate(output, x, t, clip=True)
        if self.prediction_type == "sample":  # from the unclipped estimate, as diffusers
            eps = (x - abar.sqrt() * output) / (1.0 - abar).sqrt()
        else:
            eps = output
        return abar_prev.sqrt() * x0 + (1.0 - abar_prev).sqrt() * eps

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        abar = self._abar(t).view(-1, 1, 1)
        return abar.sqrt() * x0 + (1.0 - abar).sqrt() * noise

    def sampling_timesteps(self, steps: int) -> list[int]:
        """``steps`` distinct grid times, the top of the grid first, evenly spread below."""
        n = len(self.grid_times)
        if not 1 <= steps <= n:
            raise ValueError(f"consistency sampling takes 1..{n} steps on this grid "
                             f"(skip {self.skip}), got {steps}")
        from_top = sorted({round(i * n / steps) for i in range(steps)})
        return [self.grid_times[n - 1 - k] for k in from_top]


def consistency_sample(denoiser, cond: torch.Tensor, schedule: ConsistencySchedule,
                       noises: torch.Tensor, timesteps: list[int]) -> torch.Tensor:
    """Multistep consistency sampling: (B or 1, cond_dim) -> normalised (B, T, D) chunk.

    ``noises`` (len(timesteps), B, T, D): the first starts the chain at the grid's top
    (as the teacher's DDIM does), each later one re-noises the clean estimate to the
    next time. Each step is one denoiser call; the result is clipped to the action range.
    """
    x = noises[0]
    clean = x
    for i, t in enumerate(timesteps):
        tt = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
        if i > 0:
            x = schedule.add_noise(clean, noises[i], tt)
        clean = schedule.consistency(denoiser(x, t, cond).float(), x, tt)
        if schedule.clip_range is not None:
            clean = clean.clamp(-schedule.clip_range, schedule.clip_range)
    return clean
