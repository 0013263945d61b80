"""``PolicyNodeConfig``: parameters of ``policy_node`` (``config/policy_node.yaml``).

Pure (no torch, no rclpy): the choices of ``device`` and ``precision`` repeat
``policy.devices.DEVICES`` / ``PRECISIONS`` (a test keeps them equal) so that
reading this config does not import torch.
"""

from __future__ import annotations

import dataclasses

from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.acting.grasp_retry import GraspRetryConfig
from diffusion_policy_ros.config import param, section

DEVICE_CHOICES = ("auto", "cpu", "cuda", "npu")
PRECISION_CHOICES = ("fp32", "fp16", "bf16")
BACKEND_CHOICES = ("torch", "onnxruntime", "aotinductor")
TICK_SOURCE_CHOICES = ("observation", "timer")


@dataclasses.dataclass
class PolicyNodeConfig:
    """Parameters of ``policy_node``; the action columns are ``joint_names + [gripper_joint]``."""

    checkpoint: str = param(
        "", "Checkpoint directory (model.safetensors + config.json + metadata.json, as written "
        "by dpr train). Empty = not set: configure fails and says so")
    device: str = param(
        "auto", "Inference device: auto (cuda, then npu, then cpu) | cpu | cuda | npu (Ascend, "
        "needs torch_npu; same code path as cuda)", choices=DEVICE_CHOICES)
    precision: str = param("fp32", "Autocast precision: fp32 | fp16 | bf16",
                           choices=PRECISION_CHOICES)
    num_inference_steps: int = param(
        0, "Denoiser calls per chunk (DDIM steps, or consistency steps for a distilled "
        "checkpoint: 1, 2, 4); 0 = the checkpoint's num_inference_steps", low=0, high=1000)
    num_samples: int = param(
        0, "Chunks sampled per observation, medoid returned; 0 = the checkpoint's "
        "num_samples", low=0, high=64)
    backend: str = param(
        "torch", "Runtime: torch (eager, any device) | onnxruntime | aotinductor (the static "
        "graphs dpr export [--format aotinductor] wrote; CPU, fp32, the exported step count "
        "and K)", choices=BACKEND_CHOICES)
    graph_dir: str = param("", "Exported graphs for backend onnxruntime or aotinductor; "
                           "empty = <checkpoint>/onnx or <checkpoint>/aot/threads_<N>, N the "
                           "threads this node runs (num_threads, or torch's default)")
    num_threads: int = param(
        1, "torch intra-op threads for the process; 0 = leave torch's default. Measured: one "
        "thread degrades gracefully when the 500 Hz tracker shares the CPU, two stall",
        low=0, high=256)
    niceness: int = param(
        -10, "CPU niceness of every thread of the process this node runs in (-20..19; 0 = "
        "as started): below 0 its chunks run ahead of normal-priority work (a simulation, "
        "a recorder), never ahead of pd_tracker_node's SCHED_FIFO loop. Needs CAP_SYS_NICE "
        "or a 'nice' limit; without it the node runs as started and says so",
        low=-20, high=19)
    inference_priority: int = param(
        0, "SCHED_FIFO priority of the thread that computes the chunks (0 = off: it runs at "
        "the node's niceness): a chunk then starts as soon as its observation is complete "
        "instead of waiting for a time slice. Keep it below pd_tracker_node's "
        "realtime_priority, whose loop must still come first. Needs CAP_SYS_NICE or an "
        "'rtprio' limit; without it the thread keeps the niceness and the node says so",
        low=0, high=98)
    rate_hz: float = param(10.0, "Action chunks per second (on the frames' stamps, or the "
                           "node clock with tick_source timer)", low=0.1, high=200.0)
    tick_source: str = param(
        "observation", "What starts a chunk: observation (the frame that completes an image + "
        "cloud pair, about rate_hz of them a second, so the chunk starts as soon as its "
        "observation is complete; a rate_hz timer ticks only when frames stop, so refusals "
        "are still reported) | timer (a rate_hz timer on the node clock, at any phase to the "
        "camera)", choices=TICK_SOURCE_CHOICES)
    max_obs_age_s: float = param(
        0.5, "Refuse to act when the newest observation (or the joint_states it is paired "
        "with) is older than this (s)", low=0.01, high=60.0)
    joint_names: list = param(
        ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6"],
        "Arm joints in action / proprioception order; the checkpoint must have been trained "
        "for joint_names + [gripper_joint]")
    gripper_joint: str = param("gripper_joint", "Gripper column (opening in m), last in every "
                               "action chunk point and proprioception vector")
    autostart: bool = param(False, "Configure and activate on start-up (plain ros2 run, "
                            "in-process bring-up); otherwise wait for lifecycle transitions")
    warmup_iterations: int = param(
        3, "Chunks computed on synthetic input during configure, so the first real chunk is "
        "as fast as the rest (also loads the language model)", low=0, high=100)
    warmup_instruction: str = param(
        "pick up the red cube", "Instruction embedded during warm-up (any text; the real "
        "instruction comes on the instruction topic)")
    seed: int = param(-1, "Seed of the chunks' initial-noise sequence (new noise every chunk, "
                      "the sequence restarts with every instruction: reproducible runs); "
                      "-1 = unseeded", low=-1, high=2**31 - 1)
    base_frame: str = param("base_link", "Frame of policy/markers (the root link of the "
                            "URDF)")
    publish_markers: bool = param(True, "Publish policy/markers (end-effector path from "
                                  "forward kinematics) when someone subscribes")
    urdf_file: str = param("", "Robot description whose chain root -> joint_names -> "
                           "tool_link gives policy/markers' forward kinematics; empty = the "
                           "packaged arm (description/arm.urdf)")
    tool_link: str = param("tcp", "URDF link drawn as the end effector in policy/markers")
    instruction_max_chars: int = param(
        256, "Longest instruction taken (characters); a longer one is refused whole, counted "
        "and logged, and the current one stays. A grasp instruction takes 20-60 characters, "
        "and the sentence encoder reads at most 256 word pieces (about a character each at "
        "worst), so nothing longer could be meant or read", low=1, high=100000)
    instruction_min_interval_s: float = param(
        0.5, "Instructions start new tasks at most this often (s), after a burst of three (a "
        "simulated reset, a person's words and a correction come moments apart): a faster "
        "stream is coalesced, its newest words taken when the interval has passed and the "
        "rest counted, so a flood cannot keep restarting the observation history and leave "
        "the policy no frame to act on", low=0.0, high=60.0)
    read_instructions: bool = param(
        True, "Read instructions with the grasp vocabulary (docs/reference/instructions.md) "
        "before the policy does: a correction ('no, the blue one') becomes the sentence of the "
        "object in force, and words that name no object or correct nothing hold the arm, "
        "said on policy/status. false: any words go to the policy as said (a policy trained "
        "on another vocabulary)")
    diagnostics_period_s: float = param(1.0, "Period of /diagnostics (s)", low=0.05, high=60.0)
    grasp_retry: GraspRetryConfig = section(GraspRetryConfig)
    grasp_lift: GraspLiftConfig = section(GraspLiftConfig)

    @property
    def action_joint_names(self) -> list[str]:
        return [*self.joint_names, self.gripper_joint]

    def validate(self) -> None:
        names = self.action_joint_names
        if not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"joint names must be non-empty strings, got {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"joint_names + [gripper_joint] has duplicates: {names}")
