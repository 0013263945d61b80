"""Proprioception encoder: the normalised joint-position history -> one token."""

from __future__ import annotations

from torch import nn

from diffusion_policy_ros.policy.activations import Mish


class ProprioEncoder(nn.Sequential):
    """(B, To, state_dim) in [-1, 1] -> (B, out_dim), a 2-layer MLP over the flat history."""

    def __init__(self, n_obs_steps: int, state_dim: int, out_dim: int):
        super().__init__(nn.Flatten(1), nn.Linear(n_obs_steps * state_dim, out_dim), Mish(),
                         nn.Linear(out_dim, out_dim))
