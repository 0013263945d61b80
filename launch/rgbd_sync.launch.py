"""rgbd_sync_node alone, e.g. behind the Azure Kinect ROS driver.

ros2 launch diffusion_policy_ros rgbd_sync.launch.py namespace:=cell1 [params_file:=my_camera.yaml]
The driver's topics (rgb/image_raw, depth_to_rgb/image_raw, rgb/camera_info)
are expected under camera/; add remappings to this Node if your driver
publishes elsewhere. config/rgbd_sync.yaml applies in any namespace; params_file
(e.g. your camera's camera_to_base) overrides it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from diffusion_policy_ros.launch_support import (
    check_params_file,
    layered_parameters,
    note_given_arguments,
    params_file_description,
    parse_bool,
)


def _node(context, params_file: str, given: set[str]):
    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    use_sim_time = parse_bool("use_sim_time", arg("use_sim_time"))
    return [Node(package="diffusion_policy_ros", executable="rgbd_sync_node",
                 name="rgbd_sync_node", namespace=arg("namespace"), output="screen",
                 parameters=layered_parameters(
                     "rgbd_sync_node", params_file,
                     {"use_sim_time": (use_sim_time, "use_sim_time")}, given,
                     check_params_file(arg("params_file"))))]


def generate_launch_description():
    params_file = os.path.join(get_package_share_directory("diffusion_policy_ros"), "config",
                               "rgbd_sync.yaml")
    given: set[str] = set()
    return LaunchDescription([
        OpaqueFunction(function=note_given_arguments(given)),  # before the defaults fill in
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of the camera topics and the node"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (bag replay, simulation)"),
        DeclareLaunchArgument("params_file", default_value="",
                              description=params_file_description("config/rgbd_sync.yaml")),
        OpaqueFunction(function=_node, args=[params_file, given]),
    ])
