"""The MuJoCo simulation alone: arm, table, objects and the Kinect-like camera.

ros2 launch diffusion_policy_ros sim.launch.py [use_sim_time:=true] [real_time_factor:=0.5] \\
    [sim_instructions:=false] [namespace:=...] [params_file:=my_sim.yaml]
Publishes the Azure Kinect driver's topics, joint_states, its own latched instruction
per episode (sim_instructions:=false: none, it waits for yours) and sim/episode;
takes arm_controller/commands and gripper_controller/commands. Without policy_node
nobody republishes a volatile instruction: send yours latched,
ros2 topic pub --once --keep-alive 2 --qos-durability transient_local /instruction \\
    std_msgs/msg/String ...
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from diffusion_policy_ros.launch_support import (
    check_params_file,
    describe_argument,
    layered_parameters,
    note_given_arguments,
    params_file_description,
    parse_bool,
    typed_parameters,
)
from diffusion_policy_ros.sim.sim_config import SimConfig

SIM_ARGUMENTS = ("real_time_factor", "seed", "time_limit_s", "auto_reset")


def _node(context, params_file: str, given: set[str]):
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    use_sim_time = parse_bool("use_sim_time", arg("use_sim_time"))
    params = typed_parameters(SimConfig, {name: arg(name) for name in SIM_ARGUMENTS})
    values = {name: (value, name) for name, value in params.items()}
    values |= {"publish_clock": (use_sim_time, "use_sim_time"),
               "publish_instruction": (parse_bool("sim_instructions", arg("sim_instructions")),
                                       "sim_instructions")}
    return [Node(package="diffusion_policy_ros", executable="sim_node", name="sim_node",
                 namespace=arg("namespace"), output="screen",
                 parameters=layered_parameters("sim_node", params_file, values, given,
                                               check_params_file(arg("params_file"))))]


def generate_launch_description():
    params_file = os.path.join(get_package_share_directory("diffusion_policy_ros"), "config",
                               "sim.yaml")
    given: set[str] = set()
    return LaunchDescription([
        OpaqueFunction(function=note_given_arguments(given)),  # before the defaults fill in
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of every topic of the simulated robot"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Publish /clock from the simulation and stamp with "
                              "sim time"),
        DeclareLaunchArgument("sim_instructions", default_value="true",
                              description="true: publish an instruction of its own per "
                              "episode; false: wait for yours. Either way it scores the "
                              "object the last instruction names"),
        *[DeclareLaunchArgument(name, default_value="", description=describe_argument(
            SimConfig, name, params_file, "sim_node")) for name in SIM_ARGUMENTS],
        DeclareLaunchArgument("params_file", default_value="",
                              description=params_file_description("config/sim.yaml")),
        OpaqueFunction(function=_node, args=[params_file, given]),
    ])
