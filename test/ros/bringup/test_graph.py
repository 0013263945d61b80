"""The nodes ``dpr bringup`` starts: the same as grasp.launch.py, options mapped to parameters."""

import sys
from pathlib import Path

import yaml

from diffusion_policy_ros.config import CONFIG_DIR
from diffusion_policy_ros.ros.bringup.graph import node_specs
from diffusion_policy_ros.ros.bringup.options import Options

ROOT = Path(__file__).resolve().parents[3]


def _args(specs, name):
    return next(s.ros_args for s in specs if s.name == name)


def test_nodes_match_the_launch_file(tmp_path):
    specs = node_specs(Options(), str(tmp_path))
    assert [s.name for s in specs] == ["sim_node", "rgbd_sync_node", "policy_node",
                                       "pd_tracker_node"]
    launch = (ROOT / "launch" / "grasp.launch.py").read_text()
    for spec in specs:
        assert f'executable="{spec.name}"' in launch
        assert spec.command()[:3] == [sys.executable, "-m", spec.module]
        params_file = Path(spec.ros_args[spec.ros_args.index("--params-file") + 1])
        assert params_file.parent == CONFIG_DIR and f'"{params_file.name}"' in launch
    policy = _args(specs, "policy_node")
    for pair in ("autostart:=true", f"checkpoint:={tmp_path}", "device:=auto",
                 "num_inference_steps:=0", "use_sim_time:=false"):
        assert pair in policy
    assert "publish_clock:=false" in _args(specs, "sim_node")
    assert "auto_reset:=false" not in _args(specs, "sim_node")  # run-forever: as launched
    assert "start_paused:=true" not in _args(specs, "sim_node")  # wall clock: never held


def test_episode_options_shape_the_sim_and_overrides_come_last(tmp_path):
    opts = Options(episodes=3, seed=5, instruction="pick up the blue cube",
                   sim_params=["time_limit_s:=5.0"], policy_params=["seed:=1"])
    specs = node_specs(opts, str(tmp_path))
    sim = _args(specs, "sim_node")
    for pair in ("auto_reset:=false", "publish_instruction:=false", "seed:=4"):
        assert pair in sim
    assert sim[-2:] == ["-p", "time_limit_s:=5.0"]
    assert _args(specs, "policy_node")[-2:] == ["-p", "seed:=1"]
    assert "sim_node" not in {s.name for s in node_specs(Options(sim=False), "c")}
    # The sync node makes observations at the policy's rate unless told otherwise.
    assert "output_rate_hz" not in " ".join(_args(specs, "rgbd_sync_node"))
    faster = _args(node_specs(Options(policy_params=["rate_hz:=15.0"]), "c"), "rgbd_sync_node")
    assert faster[-2:] == ["-p", "output_rate_hz:=15.0"]
    both = _args(node_specs(Options(policy_params=["rate_hz:=15.0"],
                                    sync_params=["output_rate_hz:=0.0"]), "c"), "rgbd_sync_node")
    assert both[-2:] == ["-p", "output_rate_hz:=0.0"]
    # Switching instructions: this process publishes both, the sim none.
    switched = node_specs(Options(episodes=1, switch_after_s=1.0), str(tmp_path))
    assert "publish_instruction:=false" in _args(switched, "sim_node")


def test_namespace_sim_time_and_rviz_as_the_launch_arguments(tmp_path):
    opts = Options(namespace="/arm_left", use_sim_time=True, rviz=True)
    specs = node_specs(opts, str(tmp_path), rviz_dir=tmp_path)
    assert [s.name for s in specs][-2:] == ["robot_state_publisher", "rviz2"]
    for spec in specs:
        args = spec.ros_args
        assert args[args.index("-r") + 1] == "__ns:=/arm_left"
        assert "use_sim_time:=true" in args
    assert "publish_clock:=true" in _args(specs, "sim_node")
    # Time stops for every node until the runner sees policy_node active.
    assert "start_paused:=true" in _args(specs, "sim_node")
    rviz = specs[-1].command()
    assert rviz[:4] == ["ros2", "run", "rviz2", "rviz2"]
    assert rviz[rviz.index("-d") + 1] == str(CONFIG_DIR / "grasp.rviz")
    assert rviz.index("-d") < rviz.index("--ros-args")
    params = yaml.safe_load((tmp_path / "robot_state_publisher.yaml").read_text())
    assert "<robot" in params["robot_state_publisher"]["ros__parameters"]["robot_description"]
    assert not any(s.ours for s in specs[-2:]) and all(s.ours for s in specs[:-2])



def test_a_params_file_goes_after_the_defaults_and_before_what_was_asked_for(tmp_path):
    """As grasp.launch.py params_file:=: it overrides the shipped files and what dpr bringup
    only defaults to; the options given and the --*-param overrides override it."""
    mine = str(tmp_path / "mine.yaml")
    policy = _args(node_specs(Options(params_files=[mine], device="cpu",
                                      policy_params=["seed:=1"]), "ck"), "policy_node")
    at = policy.index(mine)
    assert policy[:2] == ["--params-file", str(CONFIG_DIR / "policy_node.yaml")]
    # The defaults in a file under the shipped files' key (rcl lets the key of -p, /**,
    # win over a /**/policy_node entry of the user's file, whatever the order).
    assert policy[at - 3] == policy[at - 1] == "--params-file"
    defaults = yaml.safe_load(Path(policy[at - 2]).read_text())["/**/policy_node"]
    assert defaults["ros__parameters"] == {"checkpoint": "ck", "num_inference_steps": 0,
                                           "use_sim_time": False}
    for asked in ("device:=cpu", "autostart:=true"):
        assert policy.index(asked) > at
    assert policy[-2:] == ["-p", "seed:=1"]
    sim = _args(node_specs(Options(params_files=[mine], use_sim_time=True, episodes=1),
                           "ck"), "sim_node")
    for asked in ("use_sim_time:=true", "publish_clock:=true", "auto_reset:=false"):
        assert sim.index(asked) > sim.index(mine)
