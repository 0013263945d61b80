"""Checkpoint I/O: a directory of safetensors weights and JSON, never a pickle.

Layout (one directory per checkpoint)::

    model.safetensors   weights + normaliser statistics (``normalizer.*`` buffers)
    config.json         DiffusionPolicyConfig fields
    metadata.json       format, dataset id / hash, code version, git commit, robot
                        interface (joint names, action dim, dt, T, To, Ta),
                        parameter count, sha256 of model.safetensors

safetensors holds plain tensors only, so loading cannot execute code (unlike
``torch.load``); the sha256 catches corruption that still parses (flipped
bytes), the safetensors header check catches truncation. Every failure is a
``CheckpointError`` whose message names the file and what to do.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import diffusion_policy_ros
from diffusion_policy_ros.config import ConfigError
from diffusion_policy_ros.errors import InputError
from diffusion_policy_ros.policy.configuration_diffusion import (
    DiffusionPolicyConfig,
    policy_config_from_dict,
    policy_config_to_dict,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

FORMAT = "diffusion_policy_ros.policy/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
METADATA = "metadata.json"


class CheckpointError(RuntimeError, InputError):
    """A policy checkpoint cannot be used; the message says why."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint directory or one of its files is missing."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is truncated, altered or unparsable."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint was trained for another robot interface (joints, action size)."""


def git_commit() -> str | None:
    """HEAD of the repository this package runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(diffusion_policy_ros.__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def robot_interface(config: DiffusionPolicyConfig) -> dict:
    return {"joint_names": list(config.joint_names), "action_dim": config.action_dim,
            "action_dt_s": config.action_dt_s, "horizon": config.horizon,
            "n_obs_steps": config.n_obs_steps, "n_action_steps": config.n_action_steps}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def save_checkpoint(policy: DiffusionPolicy, directory: str | Path, *, dataset_id: str,
                    dataset_hash: str | None = None, extra: dict | None = None) -> Path:
    """Write ``policy`` (weights, normaliser, config, metadata) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in policy.state_dict().items()}
    weights = directory / WEIGHTS
    save_file(tensors, str(weights), metadata={"format": FORMAT})
    _write_json(directory / CONFIG, policy_config_to_dict(policy.config))
    metadata = {
        "format": FORMAT,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "code_version": diffusion_policy_ros.__version__,
        "git_commit": git_commit(),
        "dataset": {"id": dataset_id, "hash": dataset_hash},
        "robot": robot_interface(policy.config),
        "parameters": policy.parameter_counts(),
        "weights_sha256": _sha256(weights),
        "extra": extra or {},
    }
    _write_json(directory / METADATA, metadata)
    return directory


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint file {path} is missing")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointCorruptError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise CheckpointCorruptError(f"{path} must hold a JSON object")
    return doc


def read_metadata(directory: str | Path) -> dict:
    """The checkpoint's ``metadata.json`` (e.g. to show what a checkpoint is without loading)."""
    return _read_json(Path(directory) / METADATA)


def _check_robot(directory: Path, robot: dict, joint_names: Sequence[str] | None,
                 action_dim: int | None) -> None:
    if action_dim is not None and robot.get("action_dim") != action_dim:
        raise CheckpointMismatchError(
            f"checkpoint {directory} predicts {robot.get('action_dim')} action values per step, "
            f"this robot needs {action_dim}")
    if joint_names is not None and robot.get("joint_names") != list(joint_names):
        raise CheckpointMismatchError(
            f"checkpoint {directory} was trained for joints {robot.get('joint_names')}, this "
            f"robot has {list(joint_names)} (names and order must match)")


def load_checkpoint(directory: str | Path, *, joint_names: Sequence[str] | None = None,
                    action_dim: int | None = None,
                    device: str | torch.device = "cpu") -> tuple[DiffusionPolicy, dict]:
    """(policy in eval mode on ``device``, metadata); checks against the robot when given.

    Raises ``CheckpointNotFoundError``, ``CheckpointCorruptError`` or
    ``CheckpointMismatchError`` (all ``CheckpointError``).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointNotFoundError(f"checkpoint directory {directory} does not exist")
    metadata = _read_json(directory / METADATA)
    if metadata.get("format") != FORMAT:
        raise CheckpointCorruptError(f"{directory / METADATA}: format {metadata.get('format')!r}"
                                     f", expected {FORMAT!r}")
    raw_config = _read_json(directory / CONFIG)
    _check_robot(directory, metadata.get("robot", {}), joint_names, action_dim)
    try:
        config = policy_config_from_dict(raw_config)
    except ConfigError as exc:
        raise CheckpointCorruptError(f"{directory / CONFIG}: {exc}") from None
    if robot_interface(config) != metadata.get("robot"):
        raise CheckpointCorruptError(f"{directory}: config.json and metadata.json describe "
                                     "different robot interfaces")
    weights = directory / WEIGHTS
    if not weights.is_file():
        raise CheckpointNotFoundError(f"checkpoint file {weights} is missing")
    if _sha256(weights) != metadata.get("weights_sha256"):
        raise CheckpointCorruptError(f"{weights} does not match the sha256 in {METADATA} "
                                     "(truncated or altered after saving)")
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError) as exc:
        raise CheckpointCorruptError(f"{weights} is not a readable safetensors file "
                                     f"({exc})") from None
    policy = DiffusionPolicy(config)
    try:
        policy.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise CheckpointCorruptError(f"{weights} does not fit the model of {CONFIG}: "
                                     f"{exc}") from None
    return policy.to(device).eval(), metadata
