"""StalledGraspLift: a grasp stalled wide near the table is lifted, vertically, once per task."""

import numpy as np
import pytest

from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig, StalledGraspLift
from diffusion_policy_ros.acting.grasp_rules import grasp_rules
from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES

from .conftest import lift_config, retry_config

DT_S = 0.1  # one chunk per observation, 10 Hz
#: The packaged arm bent over the table, the tool 3 cm above its top (a grasp's pose).
GRASP_POSE_RAD = np.array([0.0, -1.2, 2.1, -2.45, -1.57, 1.2])


@pytest.fixture(scope="module")
def arm():
    return urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, "tcp")


def _joints(opening_m: float, arm_rad=GRASP_POSE_RAD) -> np.ndarray:
    return np.append(arm_rad, opening_m)


def _chunk(gripper_m: float = 0.0) -> np.ndarray:
    chunk = np.tile(np.append(GRASP_POSE_RAD + 0.01, 0.0), (16, 1))
    chunk[:, -1] = gripper_m
    return chunk


def _run(lift: StalledGraspLift, openings_m, commanded_m: float = 0.0,
         start_s: float = 3.0, arm_rad=GRASP_POSE_RAD, events=None) -> list[bool]:
    """Whether each chunk was replaced by the lift, for measured openings one chunk apart
    (the rule's events appended to ``events`` with their chunk's index)."""
    lifted = []
    for k, opening in enumerate(openings_m):
        chunk = _chunk(commanded_m)
        out = lift.apply(chunk, _joints(opening, arm_rad), start_s + k * DT_S)
        if lift.last_event is not None and events is not None:
            events.append((k, lift.last_event))
        lifted.append(out is not chunk)
        if lifted[-1]:
            assert out.shape == chunk.shape and np.all(out[:, -1] == lift.config.squeeze_to_m)
    return lifted


def test_a_grasp_stalled_wide_is_lifted_for_lift_for_s_once_per_task(arm):
    lift = StalledGraspLift(lift_config(stall_for_s=0.5, lift_for_s=2.5), arm, DT_S)
    # closing onto a cube's corners: the opening stops at 65 mm while the policy commands 0
    openings = list(np.linspace(0.085, 0.066, 3)) + [0.065] * 60
    events = []
    lifted = _run(lift, openings, events=events)
    first = lifted.index(True)
    # wide from chunk 2 (66 mm... 65 mm), stalled 0.5 s later; lifted for 2.5 s (25 chunks)
    assert first == 7 and lifted[first:first + 25] == [True] * 25
    assert not any(lifted[first + 25:])  # once per task
    assert lift.lifts == lift.lifts_total == 1 and lift.unsolved_total == 0
    # one event, at the lift's start, for the operator's log
    assert [(k, e.kind) for k, e in events] == [(first, "lifted")]
    assert events[0][1].stamp_s == pytest.approx(3.0 + first * DT_S)
    assert "stalled wide (65 mm for 0.5 s" in events[0][1].message
    assert "lifting the tool 0.15 m over 1.5 s" in events[0][1].message
    lift.restart()
    assert any(_run(lift, [0.065] * 10))  # a new task may lift again
    assert lift.lifts_total == 2


def test_the_lift_chunk_follows_the_path_from_its_stamp(arm):
    config = lift_config(stall_for_s=0.0, lift_m=0.1, lift_ramp_s=1.0, lift_for_s=2.0)
    lift = StalledGraspLift(config, arm, DT_S)
    start = lift.apply(_chunk(), _joints(0.065), 3.0)
    later = lift.apply(_chunk(), _joints(0.065), 3.5)
    heights = [arm.tool_positions(c[:, :6])[:, 2] for c in (start, later)]
    z0 = arm.tool_positions(GRASP_POSE_RAD)[2]
    np.testing.assert_allclose(heights[0][:11] - z0, np.linspace(0.0, 0.1, 11), atol=1e-3)
    np.testing.assert_allclose(heights[0][11:] - z0, 0.1, atol=1e-3)  # held at the top
    np.testing.assert_allclose(heights[1][:6] - z0, np.linspace(0.05, 0.1, 6), atol=1e-3)


@pytest.mark.parametrize("case", ["flat grasp", "still closing", "policy opens",
                                  "gripper open", "tool high"])
def test_no_lift_unless_stalled_wide_near_the_table(arm, case):
    config = lift_config()
    lift = StalledGraspLift(config, arm, DT_S)
    openings, commanded, pose = [0.065] * 30, 0.0, GRASP_POSE_RAD
    if case == "flat grasp":
        openings = [0.045] * 30  # a cube held flat: below wide_above_m
    elif case == "still closing":
        # closing at 0.03 m/s through the wide band onto a flat grasp
        openings = [0.079 - 0.003 * k for k in range(9)] + [0.045] * 21
    elif case == "policy opens":
        commanded = 0.085
    elif case == "gripper open":
        openings = [0.082] * 30
    elif case == "tool high":
        pose = arm.vertical_lift_path(GRASP_POSE_RAD, np.array([0.06]))[0][0]
        assert arm.tool_positions(pose)[2] > config.tool_below_m  # 9 cm over the table
    assert not any(_run(lift, openings, commanded, arm_rad=pose))
    assert lift.lifts_total == 0


def test_a_lift_that_cannot_be_solved_is_dropped_and_counted(arm):
    # the arm reaching far out over the table: half a metre up is out of its reach
    reaching = np.array([0.0, -0.5, 1.0, -2.0, -1.57, 0.0])
    lift = StalledGraspLift(lift_config(stall_for_s=0.0, lift_m=0.5), arm, DT_S)
    events = []
    assert not any(_run(lift, [0.065] * 3, arm_rad=reaching, events=events))  # chunks stand
    assert lift.unsolved_total == 1 and lift.lifts_total == 0
    assert lift.lifts == 1  # not tried again at every chunk
    assert [(k, e.kind) for k, e in events] == [(0, "lift_unsolved")]
    assert "not lifted, the policy's chunks stand" in events[0][1].message


@pytest.mark.parametrize("bad", [dict(wide_above_m=0.09), dict(lift_ramp_s=0.0),
                                 dict(commanded_points=0), dict(lift_m=0.0),
                                 dict(max_lifts=-1), dict(closing_below_m_s=-0.1)])
def test_invalid_configs_are_refused(arm, bad):
    with pytest.raises(ValueError):
        StalledGraspLift(lift_config(**bad), arm, DT_S)


def test_the_thresholds_that_depend_on_the_objects_have_no_defaults():
    assert GraspLiftConfig().enabled is False
    GraspLiftConfig().validate()  # off, nothing to set
    with pytest.raises(ValueError, match="wide_above_m, grasp_lift.tool_below_m, "
                                         "grasp_lift.lift_m not set"):
        GraspLiftConfig(enabled=True).validate()


# seed 5: the red cube, held at 63 mm; seed 11: the green cube, the narrowest diagonal (56 mm)
@pytest.mark.parametrize("seed, lift_enabled", [(5, True), (11, True), (5, False)])
def test_a_cube_held_across_its_corners_in_the_simulator_is_lifted(arm, seed, lift_enabled):
    """MuJoCo: the scripted expert's grasp turned 45 degrees closes the fingers on two
    corners; a policy that then only holds still, squeezing (the failure), lifts nothing
    by itself, and the rule lifts the cube to the task's success."""
    import math

    from diffusion_policy_ros.sim.env import GraspEnv
    from diffusion_policy_ros.sim.expert import Phase, ScriptedExpert
    from diffusion_policy_ros.sim.sim_config import SimConfig

    class CornerExpert(ScriptedExpert):
        corner_yaw_rad = None

        def _choose_grasp(self, *args, **kwargs):
            grasp, yaw = super()._choose_grasp(*args, **kwargs)
            if self.corner_yaw_rad is None:  # once: a face's yaw + 45 degrees
                self.corner_yaw_rad = yaw + math.pi / 4
            return grasp, self.corner_yaw_rad

    with GraspEnv(SimConfig(render_observations=False)) as env:
        obs, info = env.reset(seed)
        assert info["task"].target.endswith("cube")
        expert = CornerExpert(env.runtime.scene.model)
        expert.reset(info["task"].target)
        while expert.phase is not Phase.CLOSE:
            obs, *_ = env.step(expert.act(env.runtime.scene))
        rules = grasp_rules(retry_config(), lift_config(enabled=lift_enabled), DT_S, arm)
        hold = np.append(obs["joint_positions"][:6], 0.0)  # stay, squeezing
        openings, done = [], False
        while not done:
            chunk = rules.apply(np.tile(hold, (16, 1)), obs["joint_positions"],
                                obs["stamp_s"])
            obs, _, terminated, truncated, info = env.step(chunk, obs["stamp_s"])
            openings.append(obs["joint_positions"][-1])
            done = terminated or truncated
    assert 0.053 < np.median(openings[:5]) < 0.08  # held across the corners
    statistics = rules.statistics()
    assert statistics["grasp_retries_total"] == 0
    if lift_enabled:
        assert statistics["grasp_lifts_total"] == 1
        assert info["task"].success and info["task"].elapsed_s < 8.0, info["task"]
    else:
        assert info["task"].timed_out and "grasp_lifts_total" not in statistics
