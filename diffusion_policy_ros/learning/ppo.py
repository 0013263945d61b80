"""PPO building blocks in plain torch: GAE, the clipped surrogate, a reusable rollout buffer.

Nothing here knows about diffusion or robots; ``ppo_policy.py`` supplies the
log-probabilities and ``finetune.py`` drives the loop.

GAE (Schulman et al., 2016) is computed for all time steps at once
(``gae_advantages``), without a Python loop over time: with w = gamma * lambda and
e(t) the last step of t's episode,

    A_t = sum_{t <= s <= e(t)} w^(s - t) delta_s = w^-t (S_t - S_{e(t)+1}),
    S_t = sum_{s >= t} w^s delta_s   (one reverse cumulative sum),
    delta_s = r_s + gamma * (1 - done_s) * V_{s+1} - V_s,

in float64, over blocks short enough that w^-t stays finite (the advantage at a
block's start is carried into the step before it). ``gae_advantages_loop`` is the
textbook reverse recursion, kept as the reference the tests and ``dpr bench gae``
compare against.
"""

from __future__ import annotations

import math

import torch


def _episode_discounted_sums(x: torch.Tensor, dones: torch.Tensor, w: float) -> torch.Tensor:
    """sum_{t <= s <= e(t)} w^(s - t) x_s for every t of (T, N) float64 ``x``."""
    t_len = x.shape[0]
    if w == 0.0:
        return x.clone()
    steps = torch.arange(t_len, dtype=x.dtype, device=x.device)[:, None]
    scale = torch.exp(steps * math.log(w))  # w^t
    suffix = torch.flip(torch.cumsum(torch.flip(x * scale, [0]), 0), [0])
    suffix = torch.cat([suffix, torch.zeros_like(suffix[:1])])
    last = torch.where(dones > 0, steps.long().expand_as(x), torch.full_like(x, t_len - 1,
                                                                          dtype=torch.long))
    episode_end = torch.flip(torch.cummin(torch.flip(last, [0]), 0).values, [0])
    return (suffix[:-1] - suffix.gather(0, episode_end + 1)) / scale


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                   last_values: torch.Tensor, gamma: float,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (T, N) in the values' float dtype, from rewards, values,
    dones (T, N) and the value after the last step ``last_values`` (N,) (used where the
    last step is not done).

    ``dones[t]`` = 1 where the episode ended with step t: nothing after it is
    bootstrapped or accumulated into A_t.
    """
    out_dtype = torch.promote_types(values.dtype, torch.float32)
    r, v, d = rewards.double(), values.double(), dones.double()
    next_v = torch.cat([v[1:], last_values.double()[None]], dim=0)
    delta = r + gamma * (1.0 - d) * next_v - v
    w = gamma * lam
    block = rewards.shape[0] if w in (0.0, 1.0) else max(1, int(600.0 / -math.log(w)))
    advantages = torch.empty_like(delta)
    carry = None
    for end in range(rewards.shape[0], 0, -block):
        begin = max(0, end - block)
        x = delta[begin:end].clone()
        if carry is not None:  # A_{end-1} = delta_{end-1} + w (1 - d_{end-1}) A_end
            x[-1] += w * (1.0 - d[end - 1]) * carry
        advantages[begin:end] = _episode_discounted_sums(x, d[begin:end], w)
        carry = advantages[begin]
    return advantages.to(out_dtype), (advantages + v).to(out_dtype)


def gae_advantages_loop(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                        last_values: torch.Tensor, gamma: float,
                        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook reverse recursion of ``gae_advantages`` (same arguments and result)."""
    out_dtype = torch.promote_types(values.dtype, torch.float32)
    r, v, d = rewards.double(), values.double(), dones.double()
    advantages = torch.zeros_like(r)
    running = torch.zeros_like(r[0])
    next_v = last_values.double()
    for t in reversed(range(r.shape[0])):
        not_done = 1.0 - d[t]
        delta = r[t] + gamma * not_done * next_v - v[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
        next_v = v[t]
    return advantages.to(out_dtype), (advantages + v).to(out_dtype)


def clipped_policy_loss(new_logp: torch.Tensor, old_logp: torch.Tensor,
                        advantages: torch.Tensor, clip: float) -> dict[str, torch.Tensor]:
    """PPO's clipped surrogate (to minimise) with its diagnostics: the fraction of
    samples whose ratio left [1 - clip, 1 + clip] and the k3 estimate of KL(old || new)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    with torch.no_grad():
        clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
    return {"policy_loss": -surrogate.mean(), "clip_fraction": clip_fraction,
            "approx_kl": approx_kl, "ratio_max": ratio.detach().max()}


def normalise_advantages(advantages: torch.Tensor, mean: torch.Tensor | None = None,
                         std: torch.Tensor | None = None) -> torch.Tensor:
    """Zero mean, unit std (statistics given: e.g. all-reduced over data-parallel ranks)."""
    mean = advantages.mean() if mean is None else mean
    std = advantages.std() if std is None else std
    return (advantages - mean) / (std + 1e-8)


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): 1 = perfect critic, <= 0 = useless."""
    var = returns.var()
    return float("nan") if var <= 0 else float(1.0 - (returns - values).var() / var)


class RolloutBuffer:
    """Preallocated (capacity, num_envs, ...) tensors, reused across iterations.

    ``fields``: name -> (per-step shape, dtype). ``put(t, envs, **values)`` writes step t
    of the given env indices; ``valid`` marks what was written. Capacity grows (once,
    when an iteration needs more) instead of reallocating every iteration.
    """

    def __init__(self, fields: dict[str, tuple[tuple, torch.dtype]], capacity: int,
                 num_envs: int):
        self.fields = dict(fields)
        self.num_envs = num_envs
        self.capacity = 0
        self.data: dict[str, torch.Tensor] = {}
        self.valid = torch.zeros(0, num_envs, dtype=torch.bool)
        self.allocations = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        old, old_valid = self.data, self.valid
        self.data = {name: torch.zeros((capacity, self.num_envs, *shape), dtype=dtype)
                     for name, (shape, dtype) in self.fields.items()}
        self.valid = torch.zeros(capacity, self.num_envs, dtype=torch.bool)
        for name, tensor in old.items():
            self.data[name][:tensor.shape[0]] = tensor
        self.valid[:old_valid.shape[0]] = old_valid
        self.capacity = capacity
        self.allocations += 1

    def clear(self) -> None:
        """Forget the last iteration (the memory stays allocated)."""
        self.valid.zero_()

    def put(self, t: int, envs: torch.Tensor, **values: torch.Tensor) -> None:
        if t >= self.capacity:
            self._allocate(max(t + 1, 2 * self.capacity))
        for name, value in values.items():
            self.data[name][t, envs] = value.to(self.data[name].dtype)
        self.valid[t, envs] = True

    def steps(self) -> int:
        """Rows in use (the longest env's step count)."""
        rows = torch.nonzero(self.valid.any(dim=1))
        return int(rows.max()) + 1 if len(rows) else 0

    def flat(self, names, extra: dict[str, torch.Tensor] | None = None
             ) -> dict[str, torch.Tensor]:
        """The valid entries of ``names`` (and of the (T, N) ``extra`` tensors) as (M, ...)."""
        t = self.steps()
        mask = self.valid[:t]
        out = {name: self.data[name][:t][mask] for name in names}
        for name, tensor in (extra or {}).items():
            out[name] = tensor[:t][mask]
        return out
