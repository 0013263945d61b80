"""Learnable N:M layer pruning of the diffusion-transformer denoiser (LightDP / TinyFusion).

The DiT's blocks are split into groups of M consecutive blocks; each group keeps N.
Which N is learnt jointly with the weights:

- **Importance** (initialisation). For block i,
  ``I_i = sum over W in {W_q, W_k, W_v, W_fc1, W_fc2} of ||W||_*``, the nuclear norm
  (sum of singular values) of the query, key and value projections (the three row
  slices of the fused ``qkv`` weight) and of the two MLP weight matrices. ``p_i =
  I_i / sum_j I_j`` over all blocks, and block i's gate logit starts at ``log p_i``.
  The seed's definition (LightDP initialises the gate scores from SVD importance of
  the Q/K/V and MLP weights); the adaLN modulation and the attention output
  projection are not counted.
- **Gates** (training). A group's candidate masks are its C(M, N) subsets of exactly N
  blocks; the logit of a subset is the sum of its blocks' gate logits (so P(subset)
  is proportional to the product of the p_i at initialisation). Every sample of a
  batch draws one subset per group with the Gumbel-softmax trick, hard and
  straight-through (``torch.nn.functional.gumbel_softmax(hard=True)``): the forward
  pass uses an exact 0/1 mask with N ones per group, the backward pass the softmax at
  temperature tau, annealed from hot (smooth, biased gradient) to cold.
- **Dropped block = identity**: block i's output is ``g_i * block(x) + (1 - g_i) * x``
  (= ``x + g_i * (block(x) - x)``, written so that a hard 0 or 1 gives x or block(x)
  bit for bit): g_i = 0 passes the input through unchanged (what the pruned model
  computes) and the straight-through gradient ``<dL/dy, block(x) - x>`` says what
  keeping the block is worth.
- **Selection**: the N highest gate logits of each group, which is also the most
  probable subset. ``prune_policy`` then builds the smaller model with ``keep_layers``
  and copies the kept blocks key for key (``policy/dit.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from diffusion_policy_ros.policy.configuration_diffusion import (
    policy_config_from_dict,
    policy_config_to_dict,
)
from diffusion_policy_ros.policy.dit import DiffusionTransformer, DiTBlock
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy


@dataclasses.dataclass(frozen=True)
class NMPattern:
    """Keep ``n`` of every ``m`` consecutive blocks."""

    n: int
    m: int

    @classmethod
    def parse(cls, text: str) -> NMPattern:
        """``"3:4"`` -> NMPattern(3, 4); a clear ``ValueError`` for anything else."""
        head, sep, tail = str(text).partition(":")
        if not sep or not head.strip().isdigit() or not tail.strip().isdigit():
            raise ValueError(f"N:M pattern {text!r}: expected two integers such as '3:4' "
                             "(keep N of every M consecutive blocks)")
        pattern = cls(int(head), int(tail))
        pattern.check()
        return pattern

    def check(self, layers: int | None = None) -> None:
        if not 1 <= self.n < self.m:
            raise ValueError(f"N:M pattern {self}: needs 1 <= N < M (N blocks kept of every "
                             "M; N = M prunes nothing)")
        if layers is not None and layers % self.m:
            raise ValueError(f"N:M pattern {self}: the denoiser's {layers} blocks do not "
                             f"split into groups of M = {self.m} consecutive blocks")

    def kept(self, layers: int) -> int:
        return layers // self.m * self.n

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"


def block_importance(block: DiTBlock) -> float:
    """SVD importance of one block: summed nuclear norms of W_q, W_k, W_v, W_fc1, W_fc2."""
    width = block.qkv.weight.shape[1]
    matrices = [*block.qkv.weight.split(width, dim=0), block.mlp[0].weight, block.mlp[2].weight]
    with torch.no_grad():
        return float(sum(torch.linalg.svdvals(w.float()).sum() for w in matrices))


def importance_distribution(dit: DiffusionTransformer) -> torch.Tensor:
    """p_i = I_i / sum_j I_j over the blocks of ``dit`` in order, (L,) float64."""
    values = []
    for block in dit.blocks.values():
        assert isinstance(block, DiTBlock)
        values.append(block_importance(block))
    importance = torch.tensor(values, dtype=torch.float64)
    return importance / importance.sum()


def candidate_masks(pattern: NMPattern) -> torch.Tensor:
    """(C(M, N), M) 0/1 rows: every way to keep N of M consecutive blocks."""
    rows = torch.zeros(math.comb(pattern.m, pattern.n), pattern.m)
    for row, kept in enumerate(itertools.combinations(range(pattern.m), pattern.n)):
        rows[row, list(kept)] = 1.0
    return rows


def select_positions(logits: torch.Tensor, pattern: NMPattern) -> list[int]:
    """Positions (0..L-1, ascending) of the N highest logits of every group of M; ties go
    to the earlier block."""
    pattern.check(logits.numel())
    kept: list[int] = []
    for start in range(0, logits.numel(), pattern.m):
        group = logits[start:start + pattern.m].tolist()
        order = sorted(range(pattern.m), key=lambda j: (-group[j], j))
        kept.extend(start + j for j in sorted(order[:pattern.n]))
    return kept


class GatedDiT(nn.Module):
    """A ``DiffusionTransformer`` whose blocks are gated by N:M Gumbel-softmax masks.

    ``forward(sample, timestep, cond)`` has the denoiser's signature, so losses and
    samplers take it in place of the DiT. In training mode every sample draws its own
    mask; in eval mode the current selection (``selected_positions``) is applied; an
    explicit ``mask`` (L,) or (B, L) overrides both. The wrapped DiT is left untouched:
    the gating lives in forward hooks that act only inside ``GatedDiT.forward``.
    """

    candidates: torch.Tensor  # a buffer

    def __init__(self, dit: DiffusionTransformer, pattern: NMPattern,
                 init_logits: torch.Tensor | None = None):
        super().__init__()
        layers = len(dit.blocks)
        pattern.check(layers)
        self.dit = dit
        self.pattern = pattern
        self.layer_ids = [int(k) for k in dit.blocks]
        if init_logits is None:
            init_logits = importance_distribution(dit).log()
        self.gate_logits = nn.Parameter(init_logits.detach().float().clone())
        self.register_buffer("candidates", candidate_masks(pattern), persistent=False)
        self.tau = 1.0
        self._gates: torch.Tensor | None = None
        self._hooks = [block.register_forward_hook(self._gate_hook(position))
                       for position, block in enumerate(dit.blocks.values())]

    def _gate_hook(self, position: int):
        def hook(module, args, output):
            if self._gates is None:
                return None
            x = args[0]
            g = self._gates[:, position].to(output.dtype).view(-1, 1, 1)
            return g * output + (1.0 - g) * x
        return hook

    def remove_hooks(self) -> None:
        """Detach the gating from the wrapped DiT for good (it is then the plain model)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    @property
    def groups(self) -> int:
        return len(self.layer_ids) // self.pattern.m

    def subset_logits(self) -> torch.Tensor:
        """(groups, C) logit of every candidate subset: the sum of its blocks' gate logits."""
        return self.gate_logits.view(self.groups, self.pattern.m) @ self.candidates.T

    def keep_probabilities(self) -> torch.Tensor:
        """(L,) marginal probability that each block is kept under the current logits."""
        probs = self.subset_logits().softmax(dim=-1)
        return (probs @ self.candidates).flatten()

    def sample_gates(self, batch: int) -> torch.Tensor:
        """(batch, L) hard 0/1 gates, N per group, straight-through soft gradient."""
        logits = self.subset_logits().expand(batch, -1, -1)
        onehot = F.gumbel_softmax(logits, tau=self.tau, hard=True, dim=-1)
        return (onehot @ self.candidates).flatten(1)

    def selected_positions(self) -> list[int]:
        return select_positions(self.gate_logits.detach(), self.pattern)

    def selected_layers(self) -> list[int]:
        """Original block indices of the current selection (``keep_layers``), ascending."""
        return [self.layer_ids[p] for p in self.selected_positions()]

    def selection_mask(self) -> torch.Tensor:
        mask = torch.zeros(len(self.layer_ids), device=self.gate_logits.device)
        mask[self.selected_positions()] = 1.0
        return mask

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor | int, cond: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        batch = sample.shape[0]
        if mask is None:
            mask = self.sample_gates(batch) if self.training else self.selection_mask()
        self._gates = mask.to(sample.device).float().expand(batch, -1)
        try:
            return self.dit(sample, timestep, cond)
        finally:
            self._gates = None


def prune_policy(policy: DiffusionPolicy, keep_layers: list[int]) -> DiffusionPolicy:
    """A copy of ``policy`` whose DiT keeps only ``keep_layers`` (original indices); every
    tensor, kept blocks included, is copied from ``policy``."""
    config = policy.config
    if config.denoiser != "dit":
        raise ValueError(f"layer pruning needs a DiT denoiser, the policy has {config.denoiser}")
    missing = sorted(set(keep_layers) - set(config.kept_layers))
    if missing:
        raise ValueError(f"blocks {missing} are not in the policy (it has {config.kept_layers})")
    values = policy_config_to_dict(config)
    values["keep_layers"] = sorted(keep_layers)
    pruned = DiffusionPolicy(policy_config_from_dict(values))
    source = policy.state_dict()
    pruned.load_state_dict({k: source[k] for k in pruned.state_dict()}, strict=True)
    return pruned.to(next(policy.parameters()).device)
