"""The nodes ``launch/grasp.launch.py`` starts, as the commands ``ros2 launch`` would run.

Each node is ``python -m diffusion_policy_ros.ros.<node> --ros-args --params-file
config/<node>.yaml -p ...`` with the launch file's argument defaults (``autostart``,
``checkpoint``, ``device``, ``num_inference_steps`` for the policy), the user's
``--params-file`` files and the ``--*-param`` overrides, layered as ``grasp.launch.py``
layers its ``params_file``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import yaml

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.launch_support import params_file_for
from diffusion_policy_ros.ros.bringup.options import Options, check_override


@dataclasses.dataclass
class NodeSpec:
    name: str  # node name (also its /diagnostics prefix and log file name)
    module: str  # a module of this package, or "PACKAGE EXECUTABLE" for `ros2 run`
    ros_args: list[str]
    arguments: list[str] = dataclasses.field(default_factory=list)  # before --ros-args

    @property
    def ours(self) -> bool:
        """One of this package's nodes (reports on /diagnostics)."""
        return self.module.startswith("diffusion_policy_ros.")

    def command(self) -> list[str]:
        start = [sys.executable, "-m", self.module] if self.ours \
            else ["ros2", "run", *self.module.split()]
        return [*start, *self.arguments, "--ros-args", *self.ros_args]


def _overrides(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-p", check_override(pair))]


def _robot_description_params(directory: Path) -> Path:
    """A params file with the package's URDF for robot_state_publisher (``--rviz``)."""
    from diffusion_policy_ros.description import URDF_PATH

    path = directory / "robot_state_publisher.yaml"
    doc = {"robot_state_publisher": {"ros__parameters": {
        "robot_description": Path(URDF_PATH).read_text(encoding="utf-8")}}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _layered(name: str, shipped: str, defaults: list[str], opts: Options,
             settings: list[str], overrides: list[str], common: list[str]) -> list[str]:
    """A node's ``--ros-args``, each layer overriding the ones before it: its shipped
    parameter file, what dpr bringup sets by default (``KEY:=VALUE``), the user's
    ``--params-file`` files, what the options given set, the ``--*-param`` overrides.

    rcl merges the entries of one node-name key in order and lets keys that appear later
    win, and ``-p`` is the key ``/**``: with a user's file the defaults go into a file
    keyed ``/**/<node>`` like the shipped ones (``launch_support.layered_parameters``
    has the same reason), so a user's entry under that key comes after them."""
    if opts.params_files and defaults:
        values = {key: yaml.safe_load(value) for key, _, value in
                  (pair.partition(":=") for pair in defaults)}
        default_args = ["--params-file", params_file_for(name, values)]
    else:
        default_args = _pairs(defaults)
    users = [arg for path in opts.params_files
             for arg in ("--params-file", str(Path(path).resolve()))]
    return ["--params-file", str(CONFIG_DIR / shipped), *common, *default_args, *users,
            *settings, *overrides]


def _pairs(pairs: list[str]) -> list[str]:
    return [arg for pair in pairs for arg in ("-p", pair)]


def node_specs(opts: Options, checkpoint: str, rviz_dir: Path | None = None) -> list[NodeSpec]:
    """The nodes grasp.launch.py starts, in its order, as processes.

    ``--namespace`` remaps every node into it (``-r __ns:=``, as the launch
    file's ``namespace``); ``--use-sim-time`` makes sim_node publish ``/clock``
    and every node follow it. With ``--episodes`` sim_node runs with
    ``auto_reset:=false`` (only the commander's resets start episodes); with
    ``--instruction`` or ``--switch-after`` with ``publish_instruction:=false``
    (two latched publishers on ``instruction`` would race after each reset);
    With ``--use-sim-time`` sim_node starts paused (``start_paused:=true``; time stops
    for every node) and the runner resumes it once policy_node is active, so the
    policy's load and warm-up get the machine.
    ``--seed S`` sets ``seed:=S-1``: sim_node's start-up episode, which runs until
    the first chunks flow and is not counted, takes S-1, so the measured episodes use
    S, S+1, ... like ``dpr eval --seed S``. ``--rviz`` adds robot_state_publisher
    (URDF params file written to ``rviz_dir``) and rviz2 with config/grasp.rviz.
    ``--params-file`` files override the shipped files and what is only a default here
    (the wall clock, the shipped checkpoint, ``device:=auto``, the checkpoint's step
    count), as ``grasp.launch.py params_file:=`` does with the arguments left at their
    defaults; the options given and the overrides override them (``_layered``).
    """
    sim_time = str(opts.use_sim_time).lower()
    common = ["-r", f"__ns:=/{opts.namespace.strip('/')}"] if opts.namespace.strip("/") else []
    clock = [f"use_sim_time:={sim_time}"]
    sim_clock = [*clock, f"publish_clock:={sim_time}"]
    clock_default, clock_set = ([], _pairs(clock)) if opts.use_sim_time else (clock, [])
    sim_clock_default, sim_clock_set = (([], _pairs(sim_clock)) if opts.use_sim_time
                                        else (sim_clock, []))
    sim_args = []
    if opts.use_sim_time:
        sim_args.append("start_paused:=true")
    if opts.episodes is not None:
        sim_args.append("auto_reset:=false")
    if opts.instruction is not None or opts.switch_after_s is not None:
        sim_args.append("publish_instruction:=false")
    if opts.seed is not None:
        sim_args.append(f"seed:={opts.seed - 1}")
    specs = []
    if opts.sim:
        specs.append(NodeSpec("sim_node", "diffusion_policy_ros.ros.sim_node", _layered(
            "sim_node", "sim.yaml", sim_clock_default, opts, [*sim_clock_set, *_pairs(sim_args)],
            _overrides(opts.sim_params), common)))
    # rgbd_sync_node makes observations at the policy's rate (only those are used); an
    # output_rate_hz of --sync-param comes later and wins.
    policy_rate = [value for key, _, value in (p.partition(":=") for p in opts.policy_params)
                   if key == "rate_hz"]
    sync_rate = _pairs([f"output_rate_hz:={policy_rate[-1]}"]) if policy_rate else []
    policy_default: list[str] = []
    policy_set = ["autostart:=true"]
    for chosen, pair in ((opts.device != "auto", f"device:={opts.device}"),
                         (opts.checkpoint is not None, f"checkpoint:={checkpoint}"),
                         (opts.num_inference_steps != 0,
                          f"num_inference_steps:={opts.num_inference_steps}")):
        (policy_set if chosen else policy_default).append(pair)
    specs += [
        NodeSpec("rgbd_sync_node", "diffusion_policy_ros.ros.rgbd_sync_node", _layered(
            "rgbd_sync_node", "rgbd_sync.yaml", clock_default, opts, [*clock_set, *sync_rate],
            _overrides(opts.sync_params), common)),
        NodeSpec("policy_node", "diffusion_policy_ros.ros.policy_node", _layered(
            "policy_node", "policy_node.yaml", [*clock_default, *policy_default], opts,
            [*clock_set, *_pairs(policy_set)], _overrides(opts.policy_params), common)),
        NodeSpec("pd_tracker_node", "diffusion_policy_ros.ros.pd_tracker_node", _layered(
            "pd_tracker_node", "pd_tracker.yaml", clock_default, opts, clock_set,
            _overrides(opts.tracker_params), common)),
    ]
    if opts.rviz:
        params = _robot_description_params(rviz_dir) if rviz_dir is not None else Path(
            "robot_state_publisher.yaml")
        specs += [
            NodeSpec("robot_state_publisher", "robot_state_publisher robot_state_publisher",
                     ["--params-file", str(params), *common, *_pairs(clock)]),
            NodeSpec("rviz2", "rviz2 rviz2", [*common, *_pairs(clock)],
                     ["-d", str(CONFIG_DIR / "grasp.rviz")]),
        ]
    return specs
