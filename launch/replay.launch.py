"""The policy and tracker nodes (and perception) fed from a rosbag2, on the bag's time.

ros2 launch diffusion_policy_ros replay.launch.py bag:=/path/to/bag [rate:=1.0] \\
    [checkpoint:=...] [device:=cpu] [params_file:=my.yaml]

The bag may come from `dpr collect` (observation/image + observation/points, played
straight to policy_node), `dpr collect --raw-camera` or `ros2 bag record` on the robot
(the Azure Kinect topics, played through rgbd_sync_node), with joint_states and
instruction. It is played by `dpr replay --bag BAG --publish`, which publishes the
raw CDR in recorded order with /clock from the bag time once policy_node is active;
every node runs with use_sim_time:=true, so observation ages, chunk stamps and the
tracker's timeline follow the recording (a params_file overrides config/*.yaml and the
arguments left at their defaults, not that). The recorded actions are not played, so
the tracker's output is what this policy would have commanded. When the player ends
(or fails) the launch shuts down; the player's last lines report what was played and
how many action chunks the policy published meanwhile.
"""

import os

from ament_index_python.packages import get_package_prefix, get_package_share_directory
from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from diffusion_policy_ros.launch_support import (
    LaunchArgumentError,
    check_params_file,
    layered_parameters,
    note_given_arguments,
    params_file_description,
    typed_parameters,
)
from diffusion_policy_ros.learning.episode_bag import BagError, bag_topics, replay_plan
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig

PACKAGE = "diffusion_policy_ros"
REPORTED_TOPICS = ["policy/action_chunk"]


def _actions(context, config: str, given: set[str]):
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    bag = arg("bag")
    try:
        plan = replay_plan(bag_topics(bag))
        rate = float(arg("rate"))
    except BagError as exc:
        raise LaunchArgumentError(f"bag:={bag}: {exc}") from None
    except ValueError:
        raise LaunchArgumentError(f"rate:={arg('rate')}: expected a number") from None
    if not rate > 0:
        raise LaunchArgumentError(f"rate:={arg('rate')}: must be > 0")
    logger = get_logger("launch")
    logger.info(f"replaying {', '.join(plan.topics)} from {bag}"
                + ("" if plan.perception else " (recorded observations: no rgbd_sync_node)"))
    if plan.note:
        logger.warning(plan.note)
    sim_time = {"use_sim_time": True}
    policy_params = typed_parameters(PolicyNodeConfig, {"checkpoint": arg("checkpoint"),
                                                        "device": arg("device")})
    user_file = check_params_file(arg("params_file"))

    def parameters(name: str, shipped: str, values: dict, fixed: dict) -> list:
        return layered_parameters(name, os.path.join(config, shipped), values, given,
                                  user_file, fixed)

    actions = []
    if plan.perception:
        actions.append(Node(package=PACKAGE, executable="rgbd_sync_node", name="rgbd_sync_node",
                            output="screen", parameters=parameters(
                                "rgbd_sync_node", "rgbd_sync.yaml", {}, sim_time)))
    player = ExecuteProcess(
        cmd=[os.path.join(get_package_prefix(PACKAGE), "lib", PACKAGE, "dpr"), "replay",
             "--bag", bag, "--publish", "--rate", str(rate), "--wait", "120",
             "--wait-active", "policy_node", "--report-topics", *REPORTED_TOPICS,
             "--topics", *plan.topics],
        name="bag_player", output="screen")
    actions += [
        Node(package=PACKAGE, executable="policy_node", name="policy_node", output="screen",
             parameters=parameters("policy_node", "policy_node.yaml",
                                   {k: (v, k) for k, v in policy_params.items()},
                                   {**sim_time, "autostart": True})),
        # The recorded arm follows the recording, not these commands: no path aborts.
        Node(package=PACKAGE, executable="pd_tracker_node", name="pd_tracker_node",
             output="screen", parameters=parameters("pd_tracker_node", "pd_tracker.yaml", {},
                                                    {**sim_time, "path_tolerance": 0.0})),
        player,
        RegisterEventHandler(OnProcessExit(target_action=player, on_exit=[
            LogInfo(msg="the bag player ended: shutting down the replay"),
            EmitEvent(event=Shutdown(reason="the bag player ended"))])),
    ]
    return actions


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    given: set[str] = set()
    return LaunchDescription([
        OpaqueFunction(function=note_given_arguments(given)),  # before the defaults fill in
        DeclareLaunchArgument("bag", description="rosbag2 directory (sqlite3 or MCAP): a "
                              "dpr collect episode, or the Kinect topics + joint_states + "
                              "instruction recorded on the robot"),
        DeclareLaunchArgument("rate", default_value="1.0",
                              description="Playback speed (bag seconds per wall second)"),
        DeclareLaunchArgument("checkpoint",
                              default_value=os.path.join(share, "checkpoints", "grasp_unet_cd32"),
                              description="Policy checkpoint directory (safetensors + JSON)"),
        DeclareLaunchArgument("device", default_value="auto",
                              description="Policy device: auto | cpu | cuda | npu"),
        DeclareLaunchArgument("params_file", default_value="",
                              description=params_file_description("config/*.yaml")),
        OpaqueFunction(function=_actions, args=[os.path.join(share, "config"), given]),
    ])
