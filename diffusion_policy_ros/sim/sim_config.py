"""``SimConfig``: parameters of the simulation (``config/sim.yaml``, node ``sim_node``).

One dataclass for both drivers of ``SimulationRuntime``: ``GraspEnv`` (in
process, as fast as it computes) and ``sim_node`` (ROS, real or sim time).
``control_period_s``, ``chunk_dt_s``, ``chunk_horizon`` and ``render_observations``
only concern the env; the fields from ``real_time_factor`` on only concern ``sim_node``.
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
    object_set: str = param("five", "Objects of the scene: five (the shipped task's red, green "
                            "and blue cubes and yellow and purple cylinders, all on the table) "
                            "| varied (eight more: colours, shapes and sizes repeat, a seeded "
                            "few on the table each episode; docs/explanation/simulation.md)")
    objects_on_table: list = param([4, 7], "varied: fewest and most objects on the table in "
                                   "an episode", low=1, high=13)
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
    real_time_factor: float = param(1.0, "sim_node: sim seconds per wall-clock second; > 1 "
                                    "runs faster than real time (use with publish_clock and "
                                    "use_sim_time on the other nodes)", low=0.05, high=20.0)
    publish_clock: bool = param(False, "sim_node: publish /clock (sim time, monotonic across "
                                "resets) and stamp every message with sim time; false: stamp "
                                "with the node's ROS clock")
    publish_instruction: bool = param(True, "sim_node: each episode starts with the sim's own "
                                      "instruction, published on 'instruction' (latched); "
                                      "false: episodes wait for a person's instruction and "
                                      "keep it across resets (published again at each). "
                                      "Either way a person's instruction sets the object "
                                      "that is scored")
    clock_rate_hz: float = param(100.0, "sim_node with publish_clock: /clock rate in sim time "
                                 "(Hz), at most the 500 Hz physics rate. Every node on sim "
                                 "time takes each /clock message, so 500 Hz costs a share of "
                                 "a core in each; stamps stay exact (every joint_states and "
                                 "frame carries its own)", low=1.0, high=500.0)
    lockstep: bool = param(True, "sim_node with publish_clock: synchronous mode, as "
                           "simulators offer it. After each joint_states the physics waits "
                           "for the arm controller's next command before it steps on, so a "
                           "late controller slows sim time instead of the arm acting on a "
                           "stale effort. Free-runs (efforts expiring by command_timeout_s) "
                           "while no controller publishes or one stays silent for "
                           "lockstep_timeout_s")
    lockstep_timeout_s: float = param(0.5, "sim_node lockstep: wall time to wait for the "
                                      "controller's answer before free-running (counted, "
                                      "WARN) until its commands return (s)",
                                      low=0.001, high=60.0)
    lockstep_resend_s: float = param(0.02, "sim_node lockstep: wall time after which a "
                                     "joint_states still unanswered is published again, as "
                                     "DDS may lose a sample and repair it only when a later "
                                     "one comes (counted; logged at INFO now and then); "
                                     "0 = never (s)",
                                     low=0.0, high=60.0)
    joint_state_rate_hz: float = param(500.0, "sim_node: joint_states rate in sim time (Hz), "
                                       "at most the 500 Hz physics rate", low=1.0, high=500.0)
    command_timeout_s: float = param(0.01, "sim_node: an arm effort expires this much sim "
                                     "time after its command, as a drive's watchdog: then "
                                     "zero effort (gravity-compensated hold) and a WARN until "
                                     "commands return. Short, because one effort held over a "
                                     "stall accelerates a light wrist past any safe speed (s)",
                                     low=0.004, high=10.0)
    start_paused: bool = param(False, "sim_node: hold the physics, the camera and /clock "
                               "from start-up until ~/pause is called with data false (dpr "
                               "bringup resumes once policy_node is active, so the machine "
                               "spends the policy's start-up on it, not on an episode no "
                               "policy acts in)")
    auto_reset: bool = param(False, "sim_node: start the next episode (next seed) as soon as "
                             "one ends; false: keep simulating until ~/reset is called")
    max_catchup_s: float = param(0.008, "sim_node: most sim time one loop callback steps to "
                                 "catch up with the wall clock; a larger backlog is dropped "
                                 "(counted; the sim then runs slower than real_time_factor). "
                                 "Below command_timeout_s: commands are read between batches",
                                 low=0.002, high=1.0)
    diagnostics_period_s: float = param(1.0, "sim_node: /diagnostics period (wall clock, s)",
                                        low=0.05, high=60.0)
    instruction_max_chars: int = param(
        256, "sim_node: longest instruction followed (characters), as policy_node's "
        "instruction_max_chars; a longer one is refused whole, counted and logged, and the "
        "episode keeps its instruction", low=1, high=100000)

    def validate(self) -> None:
        if self.object_set not in ("five", "varied"):
            raise ValueError(f"object_set must be five or varied, got {self.object_set!r}")
        if len(self.objects_on_table) != 2 or self.objects_on_table[0] > self.objects_on_table[1]:
            raise ValueError(f"objects_on_table must be [fewest, most], got "
                             f"{self.objects_on_table}")
        if self.lockstep_resend_s >= self.lockstep_timeout_s:
            raise ValueError(f"lockstep_resend_s ({self.lockstep_resend_s}) must be below "
                             f"lockstep_timeout_s ({self.lockstep_timeout_s})")
        if self.max_catchup_s >= self.command_timeout_s:
            raise ValueError(f"max_catchup_s ({self.max_catchup_s}) must be below "
                             f"command_timeout_s ({self.command_timeout_s}): commands are read "
                             "between step batches, so a longer batch would time them out")

    def task_config(self) -> TaskConfig:
        return TaskConfig(self.lift_height_m, self.hold_s, self.time_limit_s)


def load_sim_config(path=CONFIG_DIR / "sim.yaml") -> SimConfig:
    """``SimConfig`` from a ROS params file (section ``sim_node``)."""
    return load_config(SimConfig, path, "sim_node")
