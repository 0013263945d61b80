"""Damped least-squares IK of the tcp site."""

import numpy as np
import pytest
import transforms3d

from diffusion_policy_ros.sim.ik import TcpIk, rotation_error_vector
from diffusion_policy_ros.sim.scene import HOME_ARM_Q_RAD


def test_reaches_random_reachable_poses(scene):
    ik = TcpIk(scene.model)
    rng = np.random.default_rng(0)
    for _ in range(50):
        q_true = HOME_ARM_Q_RAD + rng.uniform(-0.8, 0.8, 6)
        pos, rot = ik.forward(q_true)
        sol = ik.solve(HOME_ARM_Q_RAD, pos, rot)
        assert sol.converged, (q_true, sol)
        got_pos, got_rot = ik.forward(sol.q_rad)
        assert np.linalg.norm(got_pos - pos) < 1e-5
        assert np.linalg.norm(rotation_error_vector(got_rot, rot)) < 1e-4
        assert np.all(sol.q_rad >= ik.limits_rad[:, 0]) and np.all(sol.q_rad <= ik.limits_rad[:, 1])


def test_forward_matches_the_scene_and_leaves_its_state_alone(scene):
    ik = TcpIk(scene.model)
    q = np.array([0.3, -1.2, 1.4, -1.6, -1.5, 0.4])
    scene.set_arm_state(q)
    qpos = scene.data.qpos.copy()
    pos, rot = ik.forward(q)
    np.testing.assert_allclose(pos, scene.tcp_pose()[0], atol=1e-12)
    np.testing.assert_allclose(rot, scene.tcp_pose()[1], atol=1e-12)
    ik.solve(HOME_ARM_Q_RAD, pos + [0.05, 0.0, 0.0], rot)
    np.testing.assert_array_equal(scene.data.qpos, qpos)


def test_warm_start_keeps_the_nearby_solution(scene):
    """A small tool move from a pose needs only a small joint move (no branch jump)."""
    ik = TcpIk(scene.model)
    pos, rot = ik.forward(HOME_ARM_Q_RAD)
    sol = ik.solve(HOME_ARM_Q_RAD, pos + [0.02, -0.03, -0.05], rot)
    assert sol.converged and np.abs(sol.q_rad - HOME_ARM_Q_RAD).max() < 0.3


def test_unreachable_pose_reports_failure(scene):
    ik = TcpIk(scene.model, max_iterations=100)
    _, rot = ik.forward(HOME_ARM_Q_RAD)
    sol = ik.solve(HOME_ARM_Q_RAD, [2.0, 0.0, 0.3], rot)
    assert not sol.converged and sol.iterations == 100
    assert sol.position_error_m > 0.5 and np.all(np.isfinite(sol.q_rad))


@pytest.mark.parametrize("angle", [0.1, 2.0, 3.0])
def test_rotation_error_vector_is_the_exact_axis_angle(angle):
    axis = np.array([1.0, -2.0, 0.5]) / np.linalg.norm([1.0, -2.0, 0.5])
    start = transforms3d.euler.euler2mat(0.3, -0.2, 1.0)
    target = transforms3d.axangles.axangle2mat(axis, angle) @ start
    np.testing.assert_allclose(rotation_error_vector(start, target), angle * axis, atol=1e-9)
