"""The skeleton every training loop shares: ``dpr train``, ``distill``, ``prune``, ``finetune``.

A run is one process, or one ``torchrun`` rank (``learning/distributed.py``), writing
into an output directory. ``open_run`` joins the process group, refuses a used
directory unless the run resumes, and seeds torch; closing the run leaves the group.
``TrainingLoop`` counts steps (or iterations) on from where a resumed run stopped,
stops at the step count or at the wall-time budget, and calls the caller's checkpoint
at its cadence and once at the end. What a step does and what a checkpoint holds stay
with each caller.

Exact resume is ``training_state.safetensors`` (tensors) + ``training_state.json``
(everything else), each replaced atomically, so a run killed while saving keeps the
previous pair readable: never pickles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from diffusion_policy_ros.learning.distributed import ProcessRank, init_distributed
from diffusion_policy_ros.learning.optimizer_state import STATE_JSON, STATE_TENSORS
from diffusion_policy_ros.policy.devices import resolve_device


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How a run starts in its output directory."""

    device: str = "auto"
    """auto | cpu | cuda | npu (a ``torchrun`` rank takes the accelerator of its local rank)."""
    num_threads: int = 0
    """torch intra-op threads; 0 = torch's default."""
    seed: int = 0
    """torch's global seed is ``seed + rank``."""
    resume: bool = False
    """Continue from the resume state in the output directory, when there is one."""
    exclusive: bool = True
    """Refuse an output directory that is not empty unless ``resume``: a second run would
    mix its log and checkpoints with the first's."""
    distributed: bool = True
    """Join ``torchrun``'s process group when ``WORLD_SIZE`` > 1; False: one process
    whatever the environment says (loops that have no data-parallel step)."""


@dataclasses.dataclass
class TrainingRun:
    """This process's part of a run: its rank, device and output directory."""

    out: Path
    rank: ProcessRank
    device: torch.device
    resuming: bool = False
    """``resume`` was asked for and a resume state exists."""

    def close(self) -> None:
        """Leave the process group, when this run joined one."""
        if self.rank.world > 1 and dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_run(out: str | Path, settings: RunSettings) -> TrainingRun:
    """Set up this process for a run into ``out``; ``FileExistsError`` for a used ``out``
    without ``resume`` (when ``exclusive``)."""
    out = Path(out)
    if settings.distributed:
        rank, device = init_distributed(settings.device)
    else:
        rank, device = ProcessRank(), resolve_device(settings.device)
    run = TrainingRun(out, rank, device)
    try:
        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)
        used = out.exists() and any(out.iterdir())
        if rank.world > 1:
            dist.barrier()  # every rank looked before rank 0 writes anything
        if used and settings.exclusive and not settings.resume:
            raise FileExistsError(f"{out} is not empty; pass --resume to continue that run")
        run.resuming = settings.resume and (out / STATE_JSON).exists()
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(settings.seed + rank.rank)
    except BaseException:
        run.close()
        raise
    return run


def open_local_run(out: str | Path, device: str, num_threads: int, seed: int) -> TrainingRun:
    """A one-process run whose output directory may already hold earlier work (cached
    conditions, other stages): nothing to refuse, resume or leave."""
    return open_run(out, RunSettings(device, num_threads, seed, exclusive=False,
                                     distributed=False))


def save_resume_state(out: Path, tensors: Mapping[str, torch.Tensor], doc: dict) -> None:
    """Write the resume pair into ``out``, each file replaced only once complete."""
    tmp = out / (STATE_TENSORS + ".tmp")
    save_file(dict(tensors), str(tmp))
    os.replace(tmp, out / STATE_TENSORS)
    tmp = out / (STATE_JSON + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, out / STATE_JSON)


def load_resume_state(out: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, document) of ``save_resume_state``."""
    return load_file(str(out / STATE_TENSORS)), json.loads((out / STATE_JSON).read_text())


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """When a loop stops and checkpoints."""

    max_steps: int
    """The run ends once this many steps are done (counting those before a resume)."""
    checkpoint_every: int = 0
    """Steps between checkpoints; 0 = only the one at the end."""
    max_minutes: float = 0.0
    """Wall-time budget of this process's loop; it ends (with its checkpoint) after the
    step that passes it. 0 = no limit."""


Checkpoint = Callable[[int, bool], object]
"""``checkpoint(steps_done, last)``: ``last`` when the loop ends with this call (the step
count reached, or the time budget spent)."""
Step = Callable[[int], Mapping[str, object] | None]
"""``step(index)`` does step ``index`` (0-based, so ``index + 1`` steps are done after it)
and may return values for the progress bar."""


class TrainingLoop:
    """Steps until ``max_steps`` or the time budget, checkpointing at the cadence and at
    the end. The clock starts when the loop is made."""

    def __init__(self, config: LoopConfig, checkpoint: Checkpoint | None = None, *,
                 start_step: int = 0, progress: bool = False, desc: str = "train",
                 unit: str = "step", clock: Callable[[], float] = time.monotonic):
        """``checkpoint``: None where this process saves nothing (a rank other than 0);
        ``start_step``: the steps a resumed run already did."""
        self.config = config
        self.checkpoint = checkpoint
        self.step = start_step
        self.progress, self.desc, self.unit = progress, desc, unit
        self._clock = clock
        self._start_s = clock()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._start_s

    @property
    def finished(self) -> bool:
        """Every step of the run is done."""
        return self.step >= self.config.max_steps

    @property
    def out_of_time(self) -> bool:
        budget_s = 60.0 * self.config.max_minutes
        return budget_s > 0 and self.elapsed_s > budget_s

    def _checkpoint_due(self) -> bool:
        every = self.config.checkpoint_every
        return every > 0 and self.step % every == 0

    def run(self, step: Step) -> int:
        """Call ``step`` until the loop ends; returns the steps done (resumed ones
        included)."""
        bar = tqdm(total=self.config.max_steps, initial=self.step, desc=self.desc,
                   unit=self.unit, disable=not self.progress)
        try:
            while not self.finished:
                postfix = step(self.step)
                self.step += 1
                bar.update(1)
                if postfix:
                    bar.set_postfix(postfix)
                last = self.finished or self.out_of_time
                if self.checkpoint is not None and (last or self._checkpoint_due()):
                    self.checkpoint(self.step, last)
                if last:
                    break
        finally:
            bar.close()
        return self.step


class JsonLog:
    """JSON lines appended to a file as they come, so a crashed run keeps what it logged.
    Without a path (a rank other than 0) it writes nothing."""

    def __init__(self, path: Path | None):
        self.path = path

    def write(self, record: Mapping) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def restart(self, records: Sequence[Mapping]) -> None:
        """The file anew with ``records`` only (a resumed run's lines up to its state)."""
        if self.path is not None:
            self.path.write_text("".join(json.dumps(r) + "\n" for r in records),
                                 encoding="utf-8")


def loss_summary(losses: Sequence[float]) -> dict[str, float | None]:
    """Mean loss of the first and of the last 50 steps (None without steps): how far a phase
    got, for its checkpoint's metadata."""
    if not losses:
        return {"loss_first_50": None, "loss_last_50": None}
    return {"loss_first_50": float(np.mean(losses[:50])),
            "loss_last_50": float(np.mean(losses[-50:]))}
