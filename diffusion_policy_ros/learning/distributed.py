"""One process or a ``torchrun`` rank: the process group and the autocast precision that
``dpr train``, ``dpr finetune`` (and their DDP updates) share.

Under ``torchrun`` (``WORLD_SIZE`` > 1) each process joins the group with the backend of
its device (nccl on CUDA, hccl on Ascend, gloo on the CPU) and, on an accelerator, takes
the device of its ``LOCAL_RANK``; alone it joins nothing.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from diffusion_policy_ros.policy.devices import resolve_device

BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}


@dataclasses.dataclass
class ProcessRank:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0 logs and saves."""
        return self.rank == 0


def init_distributed(device_name: str) -> tuple[ProcessRank, torch.device]:
    """This process's rank and device (``auto | cpu | cuda | npu``), joining the group
    when ``torchrun`` started several."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return ProcessRank(), resolve_device(device_name)
    d = ProcessRank(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    device = resolve_device(device_name)
    if device.type != "cpu":
        device = torch.device(device.type, d.local_rank)
        getattr(torch, device.type).set_device(device)
    dist.init_process_group(BACKENDS[device.type], rank=d.rank, world_size=world)
    return d, device


def training_precision(name: str, device: torch.device) -> str:
    """``auto``: bf16 autocast on CUDA and Ascend, fp32 on the CPU; otherwise ``name``."""
    if name != "auto":
        return name
    return "bf16" if device.type in ("cuda", "npu") else "fp32"
