"""``SimConfig``: parameters of the simulation (``config/sim.yaml``, node ``sim_node``).

One dataclass for both drivers of ``SimulationRuntime``: ``GraspEnv`` (in
process, as fast as it computes) and ``sim_node`` (ROS, real or sim time).
``control_period_s`` and ``render_observations`` only concern the env.
"""

from __future__ import annotations

import dataclasses

from diffusion_policy_ros.config import CONFIG_DIR, load_config, param
from diffusion_policy_ros.sim.camera import DEFAULT_RESOLUTION
from diffusion_policy_ros.sim.task import TaskConfig


@dataclasses.dataclass
class SimConfig:
    """Scene, camera, task and episode parameters."""

    resolution: list = param(list(DEFAULT_RESOLUTION), "Camera image [width, height] (px); "
                             "at most the model's offscreen buffer (1280x720)", low=16, high=1280)
    camera_rate_hz: float = param(30.0, "Camera frame rate in sim time (Hz), as the Kinect",
                                  low=1.0, high=120.0)
    depth_noise: bool = param(False, "Corrupt depth like a time-of-flight sensor (seeded per "
                              "episode): range noise, dropouts, invalid edge pixels")
    seed: int = param(0, "Seed of the first episode when reset() is given none; each further "
                      "reset without a seed uses the next integer", low=0, high=2**31 - 1)
    settle_s: float = param(0.6, "Longest time objects get to come to rest at reset (s)",
                            low=0.0, high=5.0)
    lift_height_m: float = param(0.10, "Lift of an object's centre above its resting height "
                                 "that counts as lifted (m)", low=0.01, high=1.0)
    hold_s: float = param(0.5, "Time the target must stay lifted for success (s)",
                          low=0.0, high=10.0)
    time_limit_s: float = param(20.0, "Episode time limit (sim time, s)", low=0.1, high=3600.0)
    control_period_s: float = param(0.1, "GraspEnv: sim time one step() advances (s), a whole "
                                    "number of physics steps", low=0.002, high=2.0)
    chunk_dt_s: float = param(0.1, "GraspEnv: time between action-chunk points (s)",
                              low=0.002, high=2.0)
    chunk_horizon: int = param(16, "GraspEnv: points per action chunk", low=1, high=1000)
    render_observations: bool = param(True, "GraspEnv: render the camera and run the RGB-D "
                                      "pipeline for every observation; false = joint states, "
                                      "instruction and stamp only (fast scripted collection)")

    def task_config(self) -> TaskConfig:
        return TaskConfig(self.lift_height_m, self.hold_s, self.time_limit_s)


def load_sim_config(path=CONFIG_DIR / "sim.yaml") -> SimConfig:
    """``SimConfig`` from a ROS params file (section ``sim_node``)."""
    return load_config(SimConfig, path, "sim_node")
