"""On the simulated arm: a far step keeps the measured arm under its velocity limit, and
a chunk beyond the joint limits never moves it.

The tracker of ``config/pd_tracker.yaml`` drives the MuJoCo arm in process (a tick per
physics step). Each joint alone is asked for the far end of its range, and the base and
wrist joints together (the shoulder is left out: its far ends go through the table, and
an arm hitting the table is thrown at any speed whatever the tracker commands).
"""

import dataclasses

import numpy as np
import pytest

from diffusion_policy_ros.control import ActionChunk
from diffusion_policy_ros.sim.runtime import SimulationRuntime
from diffusion_policy_ros.sim.sim_config import SimConfig

NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]
#: Away from the ends: a point within chunk_limit_tolerance of the limit would be taken too.
INSIDE_RAD = 0.06


@pytest.fixture(scope="module")
def runtime():
    rt = SimulationRuntime(dataclasses.replace(SimConfig(), render_observations=False),
                           with_camera=False)
    yield rt
    rt.close()


def drive(rt: SimulationRuntime, row: list[float], duration_s: float) -> np.ndarray:
    """Send ``row`` as a 16-point chunk every 0.1 s, as a policy does; the largest
    measured speed of each joint (rad/s)."""
    top = np.zeros(6)
    next_chunk_s = rt.time_s
    end_s = rt.time_s + duration_s
    while rt.time_s < end_s:
        if rt.time_s >= next_chunk_s - 1e-9:
            rt.submit_chunk(ActionChunk(rt.time_s, NAMES, [0.1 * k for k in range(16)],
                                        [row] * 16))
            next_chunk_s += 0.1
        rt.tracked_step()
        top = np.maximum(top, np.abs(rt.scene.joint_velocities()[:6]))
    return top


def far_row(rt: SimulationRuntime, joints, upper: bool) -> list[float]:
    lower_m, upper_m = rt.scene.position_limits[:6, 0], rt.scene.position_limits[:6, 1]
    row = rt.scene.joint_positions()[:6].tolist()
    for j in joints:
        row[j] = upper_m[j] - INSIDE_RAD if upper else lower_m[j] + INSIDE_RAD
    return [*row, 0.04]


@pytest.mark.parametrize("joints", [[0], [1], [2], [3], [4], [5], [0, 3, 4, 5]],
                         ids=lambda j: "+".join(f"joint_{i + 1}" for i in j))
@pytest.mark.parametrize("upper", [True, False], ids=["upper", "lower"])
def test_a_far_step_keeps_the_measured_arm_under_its_velocity_limit(runtime, joints, upper):
    runtime.reset(seed=1)
    limits = np.asarray(runtime.tracker_config.velocity_limits)
    start = runtime.scene.joint_positions()[:6].copy()
    top = drive(runtime, far_row(runtime, joints, upper), 1.5)
    moved = np.abs(runtime.scene.joint_positions()[:6] - start)
    assert moved[joints].min() > 0.5, "the step moved the arm (the shoulder until the table)"
    assert np.all(top < limits), f"measured speeds {np.round(top, 3)} rad/s"
    q = runtime.scene.joint_positions()[:6]
    assert np.all(q >= runtime.scene.position_limits[:6, 0])
    assert np.all(q <= runtime.scene.position_limits[:6, 1])


def test_a_chunk_beyond_the_joint_limits_leaves_the_arm_still(runtime):
    runtime.reset(seed=1)
    start = runtime.scene.joint_positions()[:6].copy()
    top = drive(runtime, [100.0] * 6 + [0.04], 1.0)
    assert np.all(top < 0.05) and np.allclose(runtime.scene.joint_positions()[:6], start,
                                              atol=0.01)
    info = runtime.tracker.diagnostics()
    assert info["chunks_accepted"] == 0 and info["chunks_rejected"] == {"out_of_limits": 10}
