"""The perception, policy and tracker nodes fed from a rosbag2, on the bag's time.

ros2 launch diffusion_policy_ros replay.launch.py bag:=/path/to/bag [rate:=1.0] \\
    [checkpoint:=...] [device:=cpu]

The bag (recorded by `dpr collect --raw-camera` or by `ros2 bag record` on the robot:
the Azure Kinect topics, joint_states, instruction) is played by
`dpr replay --bag BAG --publish`, which publishes the raw CDR in recorded order with
/clock from the bag time; every node runs with use_sim_time:=true, so observation
ages, chunk stamps and the tracker's timeline follow the recording. The policy's
chunks (policy/action_chunk) and markers can then be recorded or shown in rviz next
to what the robot did. The recorded actions are not played, so the tracker's output
is what this policy would have commanded.
"""

import os

from ament_index_python.packages import get_package_prefix, get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "diffusion_policy_ros"
REPLAYED_TOPICS = ["camera/rgb/image_raw", "camera/rgb/camera_info",
                   "camera/depth_to_rgb/image_raw", "joint_states", "instruction"]


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    config = os.path.join(share, "config")
    sim_time = {"use_sim_time": True}
    return LaunchDescription([
        DeclareLaunchArgument("bag", description="rosbag2 directory (sqlite3 or MCAP) with "
                              "the Kinect topics, joint_states and instruction"),
        DeclareLaunchArgument("rate", default_value="1.0",
                              description="Playback speed (bag seconds per wall second)"),
        DeclareLaunchArgument("checkpoint",
                              default_value=os.path.join(share, "checkpoints", "grasp_unet"),
                              description="Policy checkpoint directory (safetensors + JSON)"),
        DeclareLaunchArgument("device", default_value="auto",
                              description="Policy device: auto | cpu | cuda | npu"),
        Node(package=PACKAGE, executable="rgbd_sync_node", name="rgbd_sync_node",
             output="screen", parameters=[os.path.join(config, "rgbd_sync.yaml"), sim_time]),
        Node(package=PACKAGE, executable="policy_node", name="policy_node", output="screen",
             parameters=[os.path.join(config, "policy_node.yaml"), sim_time,
                         {"checkpoint": LaunchConfiguration("checkpoint"),
                          "device": LaunchConfiguration("device"), "autostart": True}]),
        Node(package=PACKAGE, executable="pd_tracker_node", name="pd_tracker_node",
             output="screen", parameters=[os.path.join(config, "pd_tracker.yaml"), sim_time]),
        ExecuteProcess(
            cmd=[os.path.join(get_package_prefix(PACKAGE), "lib", PACKAGE, "dpr"), "replay",
                 "--bag", LaunchConfiguration("bag"), "--publish",
                 "--rate", LaunchConfiguration("rate"), "--wait", "60",
                 "--topics", *REPLAYED_TOPICS],
            output="screen"),
    ])
