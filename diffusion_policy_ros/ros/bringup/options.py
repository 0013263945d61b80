"""What ``dpr bringup`` was asked for, and the checks that turn bad options into exit 2."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.launch_support import params_file_problem

_OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*:=.*$", re.DOTALL)


class BringupError(Exception):
    """Bad options (exit status 2)."""


@dataclasses.dataclass
class Options:
    sim: bool = True
    episodes: int | None = None
    instruction: str | None = None
    switch_after_s: float | None = None
    checkpoint: str | None = None
    seed: int | None = None
    out: str | None = None
    device: str = "auto"
    num_inference_steps: int = 0
    ready_timeout_s: float = 180.0
    namespace: str = ""
    use_sim_time: bool = False
    rviz: bool = False
    latency_stages: bool = False
    params_files: list[str] = dataclasses.field(default_factory=list)
    max_restarts: int = 3
    sim_params: list[str] = dataclasses.field(default_factory=list)
    sync_params: list[str] = dataclasses.field(default_factory=list)
    policy_params: list[str] = dataclasses.field(default_factory=list)
    tracker_params: list[str] = dataclasses.field(default_factory=list)


def check_override(text: str) -> str:
    """``KEY:=VALUE`` as ``ros2 run ... -p`` takes it, or BringupError."""
    if not _OVERRIDE.match(text):
        raise BringupError(f"parameter override '{text}' is not KEY:=VALUE "
                           "(e.g. time_limit_s:=5.0)")
    return text


def resolve_checkpoint(checkpoint: str | None) -> str:
    """The given checkpoint directory, else the repository's ``checkpoints/grasp_unet_cd32``."""
    if checkpoint:
        path = Path(checkpoint)
        if not path.is_dir():
            raise BringupError(f"--checkpoint {checkpoint}: no such directory")
        return str(path.resolve())
    if SHIPPED_CHECKPOINT.is_dir():
        return str(SHIPPED_CHECKPOINT)
    raise BringupError(f"no checkpoint: {SHIPPED_CHECKPOINT} does not exist; pass --checkpoint "
                       "DIR (a checkpoint directory written by dpr train)")


def validate(opts: Options) -> str:
    """Checks the options; returns the checkpoint directory. Raises BringupError."""
    if opts.episodes is not None:
        if opts.episodes < 1:
            raise BringupError("--episodes must be at least 1")
        if not opts.sim:
            raise BringupError("--episodes needs the simulation (drop --no-sim): episodes are "
                               "reset and scored by sim_node")
    if opts.seed is not None and opts.seed < 1:
        raise BringupError("--seed must be at least 1: sim_node's start-up episode (not "
                           "counted) takes seed S-1")
    if opts.instruction is not None and not opts.instruction.strip():
        raise BringupError("--instruction must not be empty")
    if opts.switch_after_s is not None:
        if opts.episodes is None:
            raise BringupError("--switch-after needs --episodes (it acts on each episode)")
        if opts.instruction is not None:
            raise BringupError("--switch-after and --instruction exclude each other")
        if opts.switch_after_s <= 0.0:
            raise BringupError("--switch-after must be > 0 s")
    if opts.num_inference_steps < 0:
        raise BringupError("--num-inference-steps must be >= 0 (0 = the checkpoint's)")
    if opts.max_restarts < 0:
        raise BringupError("--max-restarts must be >= 0 (0: any node's exit ends the run)")
    for path in opts.params_files:
        problem = params_file_problem(path)
        if problem:
            raise BringupError(f"--params-file {path} {problem}")
    for pair in (*opts.sim_params, *opts.sync_params, *opts.policy_params, *opts.tracker_params):
        check_override(pair)
    if opts.namespace and not re.fullmatch(r"/?[A-Za-z][\w/]*", opts.namespace):
        raise BringupError(f"--namespace {opts.namespace!r} is not a ROS namespace (letters, "
                           "digits, _ and /, starting with a letter)")
    if opts.rviz and shutil.which("ros2") is None:
        raise BringupError("--rviz needs a ROS 2 install with rviz2 and robot_state_publisher "
                           "(`ros2 run` is not on PATH; the PyPI wheels do not ship rviz2)")
    return resolve_checkpoint(opts.checkpoint)
