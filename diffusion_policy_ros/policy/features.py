"""Batch keys of the policy (lerobot naming) with their shapes and units.

B = batch, To = ``n_obs_steps`` (oldest first), T = ``horizon``,
D = ``len(joint_names)`` (6 joint positions in rad + gripper opening in m),
N = ``num_points``, (H, W) = ``image_size``.
"""

IMAGE = "observation.image"
"""(B, To, 3, H, W) RGB, float in [0, 1] or uint8."""
POINTS_XYZ = "observation.points_xyz"
"""(B, To, N, 3) float32 point positions in base_link (m)."""
POINTS_RGB = "observation.points_rgb"
"""(B, To, N, 3) point colours, float in [0, 1] or uint8."""
STATE = "observation.state"
"""(B, To, D) measured joint positions (rad, gripper m)."""
LANGUAGE = "observation.language"
"""(B, E) frozen sentence embedding of the instruction (E = 384)."""
ACTION = "action"
"""(B, T, D) joint targets (rad, gripper m); action[:, k] at stamp + k * action_dt_s.
Episodes shorter than T are padded with their last action."""
GRASP_STATE = "grasp_state"
"""(B, D) training only: the joint state at which the episode's gripper closed (the
target of the auxiliary grasp-pose head, ``grasp_aux_weight``)."""
GRASP_POSITION = "grasp_position"
"""(B, 3) training only: the tool centre point in base_link (m) at that joint state, by
forward kinematics (the target of the grounding's centre, ``target_aux_weight``)."""
GRASP_APPROACH = "grasp_approach"
"""(B,) training only: 1.0 while the tool is still away from that grasp position (x-y
distance above ``dataset.APPROACH_RADIUS_M``), else 0.0. The grounding loss counts only
these frames: near the grasp the gripper's own points mark the spot, a shortcut that
says nothing about the words (it left the first frames 11 cm off)."""
GRASP_LABEL_WEIGHT = "grasp_label_weight"
"""(B,) training only: 1.0 when the sample's instruction is the one the episode's grasp
obeyed, 0.0 before an instruction switch (the expert was then going for another
object: the grasp labels above are not that instruction's). Weights both auxiliary
losses; the action loss counts every frame."""

OBSERVATION_KEYS = (IMAGE, POINTS_XYZ, POINTS_RGB, STATE, LANGUAGE)
