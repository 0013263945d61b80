"""The MuJoCo simulation alone: arm, table, objects and the Kinect-like camera.

ros2 launch diffusion_policy_ros sim.launch.py [use_sim_time:=true] [namespace:=...]
Publishes the Azure Kinect driver's topics, joint_states and the instruction;
takes arm_controller/commands and gripper_controller/commands.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    config = os.path.join(get_package_share_directory("diffusion_policy_ros"), "config")
    use_sim_time = LaunchConfiguration("use_sim_time")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of every topic of the simulated robot"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Publish /clock from the simulation and stamp with "
                              "sim time"),
        DeclareLaunchArgument("real_time_factor", default_value="1.0",
                              description="Simulated seconds per wall-clock second"),
        Node(package="diffusion_policy_ros", executable="sim_node", name="sim_node",
             namespace=LaunchConfiguration("namespace"), output="screen",
             parameters=[os.path.join(config, "sim.yaml"),
                         {"publish_clock": use_sim_time,
                          "real_time_factor": LaunchConfiguration("real_time_factor")}]),
    ])
