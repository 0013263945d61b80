"""What ``policy_node``'s configure loads: the checkpoint on its device, warmed up, the
arm's chain and the chunk rules its parameters enable. No rclpy: every failure is one
``ConfigureError`` sentence, which the node logs and reports while it stays alive."""

from __future__ import annotations

import dataclasses
import time

from diffusion_policy_ros.acting.grasp_rules import grasp_rules
from diffusion_policy_ros.acting.rules import ChunkRules
from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.policy.checkpoint import CheckpointError
from diffusion_policy_ros.policy.devices import DeviceUnavailableError
from diffusion_policy_ros.policy.kinematics import SerialChainKinematics, urdf_kinematics
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
from diffusion_policy_ros.policy.runner import PolicyRunner
from diffusion_policy_ros.policy.runtime_backends import BackendError


class ConfigureError(RuntimeError):
    """The policy cannot be loaded; the message says why and what to set."""


@dataclasses.dataclass
class LoadedPolicy:
    runner: PolicyRunner
    rules: ChunkRules
    kinematics: SerialChainKinematics | None
    """The URDF's chain root -> joint_names -> tool_link (markers, the lift), if read."""
    kinematics_problem: str
    """Why ``kinematics`` is None."""
    load_ms: float
    warmup_ms: list[float]


def load_policy(cfg: PolicyNodeConfig, instruction: str = "") -> LoadedPolicy:
    """Load and warm up ``cfg.checkpoint`` (``instruction``: embedded too, when given)."""
    if not cfg.checkpoint:
        raise ConfigureError("parameter 'checkpoint' is empty: set it to a checkpoint "
                             "directory written by dpr train (-p checkpoint:=/path/to/ckpt)")
    t0 = time.perf_counter()
    try:
        runner = PolicyRunner.from_checkpoint(
            cfg.checkpoint, joint_names=cfg.action_joint_names, device=cfg.device,
            precision=cfg.precision, num_inference_steps=cfg.num_inference_steps or None,
            num_samples=cfg.num_samples or None, num_threads=cfg.num_threads or None,
            backend=cfg.backend, graph_dir=cfg.graph_dir or None)
    except (CheckpointError, DeviceUnavailableError, BackendError, ValueError) as exc:
        raise ConfigureError(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - configure must fail, never crash the node
        raise ConfigureError(f"cannot load checkpoint '{cfg.checkpoint}' on device "
                             f"'{cfg.device}' ({type(exc).__name__}: {exc})") from exc
    load_ms = (time.perf_counter() - t0) * 1e3
    kinematics, problem = None, ""
    if cfg.publish_markers or cfg.grasp_lift.enabled:
        kinematics, problem = _kinematics(cfg)
    if kinematics is None and cfg.grasp_lift.enabled:
        raise ConfigureError(f"grasp_lift.enabled needs the arm's kinematics: {problem} "
                             f"(or set grasp_lift.enabled:=false)")
    warmup_ms = []
    try:
        for i in range(cfg.warmup_iterations):
            t = time.perf_counter()
            runner.warmup(cfg.warmup_instruction, iterations=1, seed=i)
            warmup_ms.append((time.perf_counter() - t) * 1e3)
        if instruction:
            runner.language.embed(instruction)
    except Exception as exc:  # noqa: BLE001
        raise ConfigureError(f"warm-up failed ({type(exc).__name__}: {exc})") from exc
    rules = grasp_rules(cfg.grasp_retry, cfg.grasp_lift, runner.config.action_dt_s, kinematics)
    return LoadedPolicy(runner, rules, kinematics, problem, load_ms, warmup_ms)


def _kinematics(cfg: PolicyNodeConfig) -> tuple[SerialChainKinematics | None, str]:
    """(the URDF's chain root -> joint_names -> tool_link, "") or (None, why not)."""
    try:
        return urdf_kinematics(cfg.urdf_file or URDF_PATH, cfg.joint_names, cfg.tool_link), ""
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        return None, (f"cannot read the arm's kinematics from "
                      f"'{cfg.urdf_file or URDF_PATH}' ({type(exc).__name__}: {exc})")
