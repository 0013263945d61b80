"""The arm's robot description (URDF), apart from the simulator.

rviz (robot_state_publisher) and the policy node's forward kinematics read it on
the robot, where MuJoCo and ``sim/`` have no business; the simulator's MJCF
(``sim/assets/arm.xml``) describes the same arm and
``test/sim/test_urdf_consistency.py`` keeps the two equal.
"""

from pathlib import Path

URDF_PATH = Path(__file__).resolve().parent / "arm.urdf"
#: The arm's revolute joints, root to tool.
ARM_JOINT_NAMES = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6")
#: Link at the tool centre point (midway between the finger pads, z = approach).
TOOL_LINK = "tcp"
