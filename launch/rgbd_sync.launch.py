"""rgbd_sync_node alone, e.g. behind the Azure Kinect ROS driver.

ros2 launch diffusion_policy_ros rgbd_sync.launch.py namespace:=cell1
The driver's topics (rgb/image_raw, depth_to_rgb/image_raw, rgb/camera_info)
are expected under camera/; add remappings to this Node if your driver
publishes elsewhere. config/rgbd_sync.yaml applies in any namespace.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from diffusion_policy_ros.launch_support import parse_bool


def _node(context, params_file: str):
    use_sim_time = parse_bool("use_sim_time",
                              LaunchConfiguration("use_sim_time").perform(context))
    return [Node(package="diffusion_policy_ros", executable="rgbd_sync_node",
                 name="rgbd_sync_node",
                 namespace=LaunchConfiguration("namespace").perform(context), output="screen",
                 parameters=[params_file, {"use_sim_time": use_sim_time}])]


def generate_launch_description():
    params_file = os.path.join(get_package_share_directory("diffusion_policy_ros"), "config",
                               "rgbd_sync.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of the camera topics and the node"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (bag replay, simulation)"),
        OpaqueFunction(function=_node, args=[params_file]),
    ])
