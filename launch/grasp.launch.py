"""The whole grasp system: camera -> rgbd_sync_node -> policy_node -> pd_tracker_node -> arm.

ros2 launch diffusion_policy_ros grasp.launch.py [use_sim:=false] [rviz:=true] \\
    [device:=cuda] [checkpoint:=/path/to/checkpoint] [num_inference_steps:=10]
ros2 topic pub --once /instruction std_msgs/msg/String "{data: 'pick up the red cube'}"

use_sim:=true (default) starts the MuJoCo simulation (sim_node). With
use_sim:=false the Kinect topics come from the Azure Kinect ROS driver and the
arm's commands go to its ros2_control controllers:
  camera/rgb/image_raw, camera/rgb/camera_info, camera/depth_to_rgb/image_raw
    <- azure_kinect_ros_driver (namespace it under camera/, or remap rgb/* and
       depth_to_rgb/* to camera/... in your driver launch)
  joint_states <- joint_state_broadcaster
  arm_controller/commands -> an effort JointGroupEffortController named arm_controller
  gripper_controller/commands -> a forward position controller named gripper_controller
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "diffusion_policy_ros"


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    config = os.path.join(share, "config")
    ns = LaunchConfiguration("namespace")
    use_sim_time = {"use_sim_time": LaunchConfiguration("use_sim_time")}
    with open(os.path.join(share, "urdf", "arm.urdf"), encoding="utf-8") as fh:
        robot_description = fh.read()
    return LaunchDescription([
        DeclareLaunchArgument("use_sim", default_value="true",
                              description="Start the MuJoCo simulation; false = real Kinect "
                              "and arm from your drivers"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Follow /clock (the simulation publishes it when "
                              "true; use true for bag replay)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of all nodes and topics"),
        DeclareLaunchArgument("device", default_value="auto",
                              description="Policy device: auto | cpu | cuda | npu"),
        DeclareLaunchArgument("checkpoint",
                              default_value=os.path.join(share, "checkpoints", "grasp_unet"),
                              description="Policy checkpoint directory (safetensors + JSON)"),
        DeclareLaunchArgument("num_inference_steps", default_value="10",
                              description="DDIM steps per action chunk"),
        DeclareLaunchArgument("rviz", default_value="false",
                              description="Start rviz2 with config/grasp.rviz and "
                              "robot_state_publisher"),
        Node(package=PACKAGE, executable="sim_node", name="sim_node", namespace=ns,
             output="screen", condition=IfCondition(LaunchConfiguration("use_sim")),
             parameters=[os.path.join(config, "sim.yaml"),
                         {"publish_clock": LaunchConfiguration("use_sim_time")}]),
        Node(package=PACKAGE, executable="rgbd_sync_node", name="rgbd_sync_node", namespace=ns,
             output="screen", parameters=[os.path.join(config, "rgbd_sync.yaml"), use_sim_time]),
        Node(package=PACKAGE, executable="policy_node", name="policy_node", namespace=ns,
             output="screen",
             parameters=[os.path.join(config, "policy_node.yaml"), use_sim_time,
                         {"device": LaunchConfiguration("device"),
                          "checkpoint": LaunchConfiguration("checkpoint"),
                          "num_inference_steps": LaunchConfiguration("num_inference_steps"),
                          "autostart": True}]),
        Node(package=PACKAGE, executable="pd_tracker_node", name="pd_tracker_node",
             namespace=ns, output="screen",
             parameters=[os.path.join(config, "pd_tracker.yaml"), use_sim_time]),
        Node(package="robot_state_publisher", executable="robot_state_publisher",
             namespace=ns, condition=IfCondition(LaunchConfiguration("rviz")),
             parameters=[{"robot_description": robot_description}, use_sim_time]),
        Node(package="rviz2", executable="rviz2", namespace=ns,
             condition=IfCondition(LaunchConfiguration("rviz")),
             arguments=["-d", os.path.join(config, "grasp.rviz")], parameters=[use_sim_time]),
    ])
