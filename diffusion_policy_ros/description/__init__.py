"""The arm's robot description (URDF), apart from the simulator.

rviz (robot_state_publisher) and the policy node's forward kinematics read it on
the robot, where MuJoCo and ``sim/`` have no business; the simulator's MJCF
(``sim/assets/arm.xml``) describes the same arm and
``test/sim/test_urdf_consistency.py`` keeps the two equal.
"""

from pathlib import Path

URDF_PATH = Path(__file__).resolve().parent / "arm.urdf"
#: Link at the tool centre point (midway between the finger pads, z = approach).
TOOL_LINK = "tcp"
