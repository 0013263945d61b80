"""Physics of the simulated arm: gravity compensation, limits, placement, a real grasp."""

import subprocess
import sys

import mujoco
import numpy as np
import pytest
import transforms3d

from diffusion_policy_ros.sim.layout import footprints_overlap, sample_object_layout
from diffusion_policy_ros.sim.scene import (
    ARM_JOINT_NAMES,
    HOME_ARM_Q_RAD,
    WORKSPACE_MAX_XY_M,
    WORKSPACE_MIN_XY_M,
    ArmScene,
    gravity_compensation,
)

#: Collision-free poses spanning the workspace (elbow up / down, wrist turned).
POSES_RAD = [HOME_ARM_Q_RAD,
             np.array([0.6, -1.2, 1.0, -1.4, -1.2, 0.8]),
             np.array([-0.9, -2.0, 1.9, -0.7, -1.8, -2.0]),
             np.array([0.2, -1.0, 0.4, -2.2, -1.57, 0.3])]


def _object_contacts(scene: ArmScene) -> list[tuple[str, str]]:
    objects = {o.geom_id for o in scene.objects}
    d, m = scene.data, scene.model
    return [(m.geom(c.geom1).name, m.geom(c.geom2).name) for c in d.contact[: d.ncon]
            if c.geom1 in objects and c.geom2 in objects]


def test_joint_order_and_state_io(scene):
    q = np.array([0.1, -1.2, 1.3, -1.4, -1.5, 0.6])
    scene.set_arm_state(q, gripper_opening_m=0.05)
    np.testing.assert_allclose(scene.joint_positions(), [*q, 0.05])
    assert scene.joint_velocities().shape == (7,)
    for i, name in enumerate(ARM_JOINT_NAMES):
        assert scene.data.qpos[scene.model.joint(name).qposadr[0]] == pytest.approx(q[i])


def test_gravity_compensation_is_exact_gravity_torque(scene):
    rng = np.random.default_rng(3)
    for _ in range(10):
        scene.set_arm_state(rng.uniform(-3, 3, 6), gripper_opening_m=rng.uniform(0, 0.085))
        scene.data.qvel[:6] = rng.normal(size=6)  # must not leak into g(q)
        mujoco.mj_forward(scene.model, scene.data)
        g = gravity_compensation(scene.model, scene.data)
        dofs = [scene.model.joint(n).dofadr[0] for n in ARM_JOINT_NAMES]
        np.testing.assert_allclose(scene.data.qfrc_gravcomp[dofs], g, atol=1e-9)
        # with zero user torque the motors deliver exactly g(q)
        np.testing.assert_allclose(scene.joint_efforts()[:6], g, atol=1e-9)
    assert np.abs(g).max() > 1.0  # not trivially zero


@pytest.mark.parametrize("pose", range(len(POSES_RAD)))
def test_gravity_compensation_holds_the_arm_still(pose):
    scene = ArmScene()
    scene.reset(seed=pose, arm_q_rad=POSES_RAD[pose])
    tcp0, _ = scene.tcp_pose()
    q0 = scene.joint_positions()
    for _ in range(1000):  # 2 s
        scene.step(np.zeros(6), 0.085)
    tcp1, _ = scene.tcp_pose()
    assert np.linalg.norm(tcp1 - tcp0) < 1e-3
    assert np.abs(scene.joint_positions()[:6] - q0[:6]).max() < 1e-3


def test_without_gravity_compensation_the_arm_falls():
    scene = ArmScene()
    scene.model.body_gravcomp[:] = 0.0
    scene.reset(seed=0)
    tcp0, _ = scene.tcp_pose()
    scene.step(np.zeros(6), 0.085, n_steps=250)
    assert np.linalg.norm(scene.tcp_pose()[0] - tcp0) > 0.05


def test_step_clamps_to_effort_and_stroke_limits(scene):
    scene.step([1e4, -1e4, 50.0, 1e3, -1e3, 0.0], 0.5)
    ctrl = scene.data.ctrl
    np.testing.assert_allclose(ctrl[:6], [150, -150, 50, 28, -28, 0])
    assert ctrl[6] == pytest.approx(0.085)
    scene.step(np.zeros(6), -1.0)
    assert scene.data.ctrl[6] == 0.0
    # user torque + gravity compensation is clamped to the joint's effort limit too
    scene.reset()
    g = gravity_compensation(scene.model, scene.data)
    sign = np.sign(g[1])
    scene.step([0.0, 150.0 * sign, 0, 0, 0, 0], 0.085)
    assert abs(scene.data.qfrc_actuator[scene.model.joint("joint_2").dofadr[0]]) <= 150.0 + 1e-9


def test_step_rejects_bad_commands(scene):
    with pytest.raises(ValueError):
        scene.step([0.0] * 5, 0.08)
    with pytest.raises(ValueError):
        scene.step([0.0, np.nan, 0, 0, 0, 0], 0.08)
    with pytest.raises(ValueError):
        scene.step(np.zeros(6), np.inf)


def test_layout_sampler_never_overlaps_over_many_seeds():
    radii = [0.032, 0.028, 0.035, 0.02, 0.02]
    for seed in range(2000):
        layout = sample_object_layout(np.random.default_rng(seed), radii,
                                      WORKSPACE_MIN_XY_M, WORKSPACE_MAX_XY_M)
        assert not footprints_overlap(layout, radii, clearance_m=0.01 - 1e-12)
        r = np.asarray(radii)[:, None]
        assert np.all(layout[:, :2] - r >= WORKSPACE_MIN_XY_M)
        assert np.all(layout[:, :2] + r <= WORKSPACE_MAX_XY_M)


def test_layout_sampler_reports_impossible_workspaces():
    with pytest.raises(ValueError):
        sample_object_layout(np.random.default_rng(0), [0.2], [0, 0], [0.1, 0.1])
    with pytest.raises(RuntimeError):
        sample_object_layout(np.random.default_rng(0), [0.05] * 30, [0, 0], [0.3, 0.3],
                             max_restarts=3)


def test_placement_200_seeds_settled_apart_inside_the_workspace(scene):
    layouts = set()
    for seed in range(200):
        scene.reset(seed=seed)
        assert not _object_contacts(scene), seed
        for obj in scene.objects:
            pos = scene.object_position(obj.name)
            r = obj.footprint_radius_m
            assert np.all(pos[:2] - r >= WORKSPACE_MIN_XY_M - 1e-3), (seed, obj.name, pos)
            assert np.all(pos[:2] + r <= WORKSPACE_MAX_XY_M + 1e-3), (seed, obj.name, pos)
            assert pos[2] == pytest.approx(obj.half_height_m, abs=2e-3), (seed, obj.name)
            z_axis = transforms3d.quaternions.quat2mat(scene.data.xquat[obj.body_id])[:, 2]
            assert z_axis[2] > 0.999, (seed, obj.name)  # upright, resting
            speed = np.linalg.norm(scene.data.qvel[obj.qvel_adr: obj.qvel_adr + 3])
            assert speed < 5e-3, (seed, obj.name)
        xy = np.array([scene.object_position(o.name)[:2] for o in scene.objects])
        radii = [o.footprint_radius_m for o in scene.objects]
        assert not footprints_overlap(xy, radii), seed
        layouts.add(tuple(np.round(xy.ravel(), 4)))
        assert scene.time_s == 0.0
    assert len(layouts) == 200


def test_reset_is_deterministic_per_seed():
    a, b = ArmScene(), ArmScene()
    np.testing.assert_array_equal(a.reset(seed=7), b.reset(seed=7))
    np.testing.assert_array_equal(a.data.qpos, b.data.qpos)
    assert not np.allclose(a.reset(seed=8), b.reset(seed=7))


# -- a scripted grasp: IK + joint-space PD on the torque interface ----------------------

KP = np.array([800.0, 800.0, 600.0, 150.0, 150.0, 100.0])
KD = np.array([80.0, 80.0, 60.0, 12.0, 12.0, 8.0])


def _ik(model, q0, target_pos, target_rot, iters=300):
    """Damped least-squares IK of the ``tcp`` site (position + orientation)."""
    d = mujoco.MjData(model)
    tcp = model.site("tcp").id
    qadr = [model.joint(n).qposadr[0] for n in ARM_JOINT_NAMES]
    dofs = [model.joint(n).dofadr[0] for n in ARM_JOINT_NAMES]
    q = np.array(q0, dtype=float)
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    for _ in range(iters):
        d.qpos[qadr] = q
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        rot = d.site_xmat[tcp].reshape(3, 3)
        err = np.concatenate([target_pos - d.site_xpos[tcp],
                              0.5 * sum(np.cross(rot[:, i], target_rot[:, i]) for i in range(3))])
        if np.linalg.norm(err) < 1e-7:
            break
        mujoco.mj_jacSite(model, d, jacp, jacr, tcp)
        jac = np.vstack([jacp[:, dofs], jacr[:, dofs]])
        q += jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
    assert np.linalg.norm(err) < 1e-5
    return q


def _min_jerk(q_a, q_b, duration_s, t_s):
    s = np.clip(t_s / duration_s, 0.0, 1.0)
    pos = 10 * s**3 - 15 * s**4 + 6 * s**5
    vel = (30 * s**2 - 60 * s**3 + 30 * s**4) / duration_s
    return q_a + (q_b - q_a) * pos, (q_b - q_a) * vel


def _track(scene, q_from, q_to, duration_s, gripper_m, hold_s=0.0):
    n = int(round((duration_s + hold_s) / scene.timestep_s))
    for k in range(n):
        q_ref, qd_ref = _min_jerk(q_from, q_to, duration_s, k * scene.timestep_s)
        q, qd = scene.joint_positions()[:6], scene.joint_velocities()[:6]
        scene.step(KP * (q_ref - q) + KD * (qd_ref - qd), gripper_m)


@pytest.mark.parametrize("name", ["red_cube", "blue_cube", "yellow_cylinder"])
def test_gripper_grasps_and_lifts_an_object(name):
    scene = ArmScene()
    scene.reset(seed=11)
    obj = next(o for o in scene.objects if o.name == name)
    start = scene.object_position(name)
    # fingers (tcp y axis) across the object's faces: yaw of the object modulo 90 deg
    yaw = transforms3d.euler.quat2euler(scene.data.xquat[obj.body_id], "szyx")[0]
    yaw = (yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4
    _, home_rot = scene.tcp_pose()
    down = transforms3d.axangles.axangle2mat([0, 0, 1], yaw) @ home_rot
    top_z = start[2] + obj.half_height_m
    grasp = np.array([start[0], start[1], top_z - 0.022])  # pads 2.2 cm down the sides
    q_home = scene.joint_positions()[:6]
    q_pre = _ik(scene.model, q_home, grasp + [0, 0, 0.12], down)
    q_grasp = _ik(scene.model, q_pre, grasp, down)
    q_lift = _ik(scene.model, q_grasp, grasp + [0, 0, 0.15], down)

    _track(scene, q_home, q_pre, 1.2, 0.085, hold_s=0.2)
    _track(scene, q_pre, q_grasp, 0.8, 0.085, hold_s=0.3)
    assert np.linalg.norm(scene.object_position(name) - start) < 0.01  # not knocked over
    _track(scene, q_grasp, q_grasp, 0.1, 0.0, hold_s=0.7)  # close
    assert scene.joint_positions()[6] > 0.03  # stopped by the object, not closed
    in_hand = scene.object_position(name) - scene.tcp_pose()[0]
    _track(scene, q_grasp, q_lift, 1.2, 0.0, hold_s=0.5)

    end = scene.object_position(name)
    tcp, _ = scene.tcp_pose()
    assert end[2] - start[2] > 0.10, (start, end)
    assert np.linalg.norm(end[:2] - tcp[:2]) < 0.01  # still between the fingers
    assert np.linalg.norm((end - tcp) - in_hand) < 0.003  # no slip while lifting
    assert abs(scene.joint_efforts()[6]) > 20.0  # squeezing


def test_home_keyframe_is_the_home_pose(scene):
    key = scene.model.key("home")
    np.testing.assert_allclose(key.qpos[:6], HOME_ARM_Q_RAD, atol=1e-12)
    mujoco.mj_resetDataKeyframe(scene.model, scene.data, key.id)
    mujoco.mj_forward(scene.model, scene.data)
    assert min((c.dist for c in scene.data.contact[: scene.data.ncon]), default=0.0) > -1e-3


def test_sim_core_does_not_import_rclpy():
    code = ("import sys, diffusion_policy_ros.sim.scene, diffusion_policy_ros.sim.camera, "
            "diffusion_policy_ros.bench.sim_core; assert 'rclpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
