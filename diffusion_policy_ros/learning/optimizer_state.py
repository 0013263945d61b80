"""Exact resume without pickles: the resume files' names, and an optimiser's state as
safetensors tensors (``dpr train`` and ``dpr finetune`` alike)."""

from __future__ import annotations

import torch

STATE_TENSORS = "training_state.safetensors"
STATE_JSON = "training_state.json"


def all_params(optimizer) -> list[torch.nn.Parameter]:
    """Every parameter of every group, in the order the state tensors are numbered."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def optimizer_state_tensors(optimizer) -> dict[str, torch.Tensor]:
    """The optimiser's per-parameter state (AdamW moments, step) as ``adam.<i>.<key>``
    tensors for a safetensors resume file (no pickles)."""
    tensors = {}
    for i, p in enumerate(all_params(optimizer)):
        for key, value in optimizer.state.get(p, {}).items():
            tensors[f"adam.{i}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return tensors


def load_optimizer_state_tensors(optimizer, tensors: dict[str, torch.Tensor]) -> None:
    """Put ``optimizer_state_tensors``' output back into the optimiser."""
    for i, p in enumerate(all_params(optimizer)):
        state = {key.split(".", 2)[2]: v.to(p.device) for key, v in tensors.items()
                 if key.startswith(f"adam.{i}.")}
        if state:
            optimizer.state[p] = state
