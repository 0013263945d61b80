"""The whole grasp system: camera -> rgbd_sync_node -> policy_node -> pd_tracker_node -> arm.

ros2 launch diffusion_policy_ros grasp.launch.py [use_sim:=false] [rviz:=true] \\
    [use_sim_time:=true] [device:=cuda] [checkpoint:=/path/to/ckpt]
ros2 topic pub --once --keep-alive 2 /instruction std_msgs/msg/String \\
    "{data: 'pick up the red cube'}"

use_sim:=true (default) starts the MuJoCo simulation (sim_node), which waits for
your instruction and scores the object it names on sim/episode (sim_instructions:=true:
it instructs itself, a new instruction per episode). With use_sim_time:=true it runs
at real_time_factor (1.0: real time) in lockstep with the tracker, so on a machine
that cannot keep up sim time slows down instead of the arm acting on stale states.
With use_sim:=false
the Kinect topics come from the Azure Kinect ROS driver and the arm's commands go to
its ros2_control controllers:
  camera/rgb/image_raw, camera/rgb/camera_info, camera/depth_to_rgb/image_raw
    <- azure_kinect_ros_driver (namespace it under camera/, or remap rgb/* and
       depth_to_rgb/* to camera/... in your driver launch)
  joint_states <- joint_state_broadcaster
  arm_controller/commands -> an effort JointGroupEffortController named arm_controller
  gripper_controller/commands -> a forward position controller named gripper_controller

Arguments are typed like the parameters they set (real_time_factor:=1 and :=1.0 both
work); an invalid value stops the launch with one error line before any node starts.
An empty tuning argument leaves the value of the parameter file (config/*.yaml).
params_file:=my.yaml (ROS 2 --params-file layout, '/**/<node>:' keys) goes to every node
after its config/<node>.yaml and the arguments left at their defaults, and before the
arguments given on the command line: those override it, it overrides the rest.

rgbd_sync_node and policy_node are respawned when they die (1 s later; the launch ends
after 3 respawns in a row of a node that did not stay up 60 s); meanwhile
pd_tracker_node brakes and holds the arm. sim_node and pd_tracker_node are not: their
exit ends the launch. Each exit is logged with the node, its exit code or signal and
the restart count (ros/processes.py has the rule; dpr bringup follows it too).
"""

import os

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from diffusion_policy_ros.launch_support import (
    ExitWatch,
    check_params_file,
    describe_argument,
    layered_parameters,
    note_given_arguments,
    params_file_description,
    parse_bool,
    typed_parameters,
)
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
from diffusion_policy_ros.ros.processes import RestartPolicy
from diffusion_policy_ros.sim.sim_config import SimConfig

PACKAGE = "diffusion_policy_ros"
#: Launch arguments that set a sim_node / policy_node parameter of the same name.
SIM_ARGUMENTS = ("real_time_factor", "seed", "time_limit_s")
POLICY_ARGUMENTS = ("device", "precision", "backend", "graph_dir", "num_inference_steps",
                    "num_samples", "num_threads", "rate_hz", "tick_source")
#: Launch defaults that differ from the parameter files.
POLICY_DEFAULTS = {"device": "auto"}
#: Respawns at a fixed delay (launch's respawn_delay), so without backoff.
RESPAWN = RestartPolicy(backoff=1.0)


def _installed(package: str) -> bool:
    try:
        get_package_share_directory(package)
    except PackageNotFoundError:
        return False
    return True


def _nodes(context, config: str, share: str, given: set[str]):
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    use_sim = parse_bool("use_sim", arg("use_sim"))
    use_sim_time = parse_bool("use_sim_time", arg("use_sim_time"))
    sim_instructions = parse_bool("sim_instructions", arg("sim_instructions"))
    rviz = parse_bool("rviz", arg("rviz"))
    user_file = check_params_file(arg("params_file"))
    sim_params = typed_parameters(SimConfig, {name: arg(name) for name in SIM_ARGUMENTS})
    policy_params = typed_parameters(PolicyNodeConfig, {
        "checkpoint": arg("checkpoint"), **{name: arg(name) for name in POLICY_ARGUMENTS}})
    # rgbd_sync_node makes observations at the policy's rate (only those are used).
    sync_params = ({"output_rate_hz": (policy_params["rate_hz"], "rate_hz")}
                   if "rate_hz" in policy_params else {})
    ns = arg("namespace")
    sim_time = {"use_sim_time": (use_sim_time, "use_sim_time")}

    def parameters(name: str, shipped: str, values: dict) -> list:
        return layered_parameters(name, os.path.join(config, shipped), values, given,
                                  user_file)

    watches = {name: ExitWatch(name, RESPAWN) for name in
               ("sim_node", "rgbd_sync_node", "policy_node", "pd_tracker_node")}
    nodes = []
    if use_sim:
        nodes.append(Node(
            package=PACKAGE, executable="sim_node", name="sim_node", namespace=ns,
            output="screen", **watches["sim_node"].node_arguments(),
            parameters=parameters("sim_node", "sim.yaml", {
                **{k: (v, k) for k, v in sim_params.items()}, **sim_time,
                "publish_clock": (use_sim_time, "use_sim_time"),
                "publish_instruction": (sim_instructions, "sim_instructions")})))
    nodes += [
        Node(package=PACKAGE, executable="rgbd_sync_node", name="rgbd_sync_node", namespace=ns,
             output="screen", **watches["rgbd_sync_node"].node_arguments(),
             parameters=parameters("rgbd_sync_node", "rgbd_sync.yaml",
                                   {**sim_time, **sync_params})),
        Node(package=PACKAGE, executable="policy_node", name="policy_node", namespace=ns,
             output="screen", **watches["policy_node"].node_arguments(),
             parameters=parameters("policy_node", "policy_node.yaml", {
                 **sim_time, **{k: (v, k) for k, v in policy_params.items()},
                 "autostart": (True, None)})),
        Node(package=PACKAGE, executable="pd_tracker_node", name="pd_tracker_node",
             namespace=ns, output="screen", **watches["pd_tracker_node"].node_arguments(),
             parameters=parameters("pd_tracker_node", "pd_tracker.yaml", sim_time)),
    ]
    nodes += [handler for node in list(nodes)
              for handler in watches[node.node_executable].handlers(node)]
    if rviz:
        missing = [p for p in ("rviz2", "robot_state_publisher") if not _installed(p)]
        if missing:
            get_logger("launch").warning(
                f"rviz:=true but {' and '.join(missing)} not installed (a ROS 2 desktop "
                "install has them; the PyPI wheels do not): starting without rviz")
        else:
            with open(os.path.join(share, "urdf", "arm.urdf"), encoding="utf-8") as fh:
                robot_description = fh.read()
            nodes += [
                Node(package="robot_state_publisher", executable="robot_state_publisher",
                     namespace=ns, parameters=[{"robot_description": robot_description,
                                                "use_sim_time": use_sim_time}]),
                Node(package="rviz2", executable="rviz2", namespace=ns,
                     arguments=["-d", os.path.join(config, "grasp.rviz")],
                     parameters=[{"use_sim_time": use_sim_time}]),
            ]
    return nodes


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    config = os.path.join(share, "config")
    sim_yaml = os.path.join(config, "sim.yaml")
    policy_yaml = os.path.join(config, "policy_node.yaml")
    given: set[str] = set()
    return LaunchDescription([
        OpaqueFunction(function=note_given_arguments(given)),  # before the defaults fill in
        DeclareLaunchArgument("use_sim", default_value="true",
                              description="Start the MuJoCo simulation; false = real Kinect "
                              "and arm from your drivers"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Follow /clock (the simulation publishes it when "
                              "true, in lockstep with the tracker: sim time slows down where the "
                              "machine cannot keep up)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of all nodes and topics"),
        DeclareLaunchArgument("sim_instructions", default_value="false",
                              description="true: the simulation publishes its own "
                              "instruction for each episode; false: it waits for yours "
                              "(ros2 topic pub ... /instruction). Either way it scores the "
                              "object the last instruction names"),
        *[DeclareLaunchArgument(name, default_value="", description=describe_argument(
            SimConfig, name, sim_yaml, "sim_node")) for name in SIM_ARGUMENTS],
        DeclareLaunchArgument("checkpoint",
                              default_value=os.path.join(share, "checkpoints", "grasp_unet_cd32"),
                              description="Policy checkpoint directory (safetensors + JSON)"),
        *[DeclareLaunchArgument(name, default_value=POLICY_DEFAULTS.get(name, ""),
                                description=describe_argument(PolicyNodeConfig, name,
                                                              policy_yaml, "policy_node"))
          for name in POLICY_ARGUMENTS],
        DeclareLaunchArgument("rviz", default_value="false",
                              description="Start rviz2 with config/grasp.rviz and "
                              "robot_state_publisher (skipped with a warning where they are "
                              "not installed)"),
        DeclareLaunchArgument("params_file", default_value="",
                              description=params_file_description("config/<node>.yaml",
                                                                  every_node=True)),
        OpaqueFunction(function=_nodes, args=[config, share, given]),
    ])
