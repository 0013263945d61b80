"""The URDF (for rviz) and the MJCF (the simulated robot) describe the same arm.

A minimal URDF forward kinematics (xml.etree + transforms3d, mimic joints
included) is compared link by link with MuJoCo's body poses at random joint
configurations, and the inertial / limit data are compared field by field.
"""

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest
import transforms3d

from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.sim.scene import ARM_JOINT_NAMES, JOINT_NAMES


def _floats(text: str | None, n: int, default: float = 0.0) -> np.ndarray:
    return np.array([float(v) for v in text.split()]) if text else np.full(n, default)


def _origin(elem) -> np.ndarray:
    """4x4 transform of an URDF ``<origin xyz rpy>`` (rpy = fixed-axis roll, pitch, yaw)."""
    t = np.eye(4)
    origin = elem.find("origin")
    if origin is not None:
        r, p, y = _floats(origin.get("rpy"), 3)
        t[:3, :3] = transforms3d.euler.euler2mat(r, p, y, "sxyz")
        t[:3, 3] = _floats(origin.get("xyz"), 3)
    return t


class UrdfModel:
    def __init__(self, path):
        root = ET.parse(path).getroot()
        self.links = {link.get("name"): link for link in root.findall("link")}
        self.joints = {j.get("name"): j for j in root.findall("joint")}
        children = {j.find("child").get("link") for j in self.joints.values()}
        (self.root,) = set(self.links) - children

    def movable(self) -> list[str]:
        return [n for n, j in self.joints.items() if j.get("type") != "fixed"]

    def fk(self, q: dict[str, float]) -> dict[str, np.ndarray]:
        """4x4 pose of every link in the root frame; mimic joints follow their master."""
        poses = {self.root: np.eye(4)}
        pending = list(self.joints.values())
        while pending:
            joint = next(j for j in pending if j.find("parent").get("link") in poses)
            pending.remove(joint)
            motion = np.eye(4)
            kind = joint.get("type")
            if kind != "fixed":
                mimic = joint.find("mimic")
                if mimic is not None:
                    value = (float(mimic.get("multiplier", 1.0)) * q[mimic.get("joint")]
                             + float(mimic.get("offset", 0.0)))
                else:
                    value = q[joint.get("name")]
                axis = _floats(joint.find("axis").get("xyz"), 3)
                if kind in ("revolute", "continuous"):
                    motion[:3, :3] = transforms3d.axangles.axangle2mat(axis, value)
                elif kind == "prismatic":
                    motion[:3, 3] = axis * value
                else:
                    raise ValueError(f"unsupported joint type {kind}")
            parent = poses[joint.find("parent").get("link")]
            poses[joint.find("child").get("link")] = parent @ _origin(joint) @ motion
        return poses


@pytest.fixture(scope="module")
def urdf() -> UrdfModel:
    return UrdfModel(URDF_PATH)


def test_urdf_has_the_joint_state_joints(urdf):
    assert set(urdf.movable()) == set(JOINT_NAMES) | {"finger_left_joint"}
    assert urdf.root == "base_link"
    assert urdf.joints["finger_left_joint"].find("mimic").get("joint") == "gripper_joint"


def test_urdf_fk_matches_mjcf_bodies(urdf, scene):
    rng = np.random.default_rng(0)
    m, d = scene.model, scene.data
    lim = scene.position_limits
    sites = {"flange": m.site("flange").id, "tcp": m.site("tcp").id}
    checked = 0
    for _ in range(25):
        q7 = rng.uniform(lim[:, 0], lim[:, 1])
        scene.set_arm_state(q7[:6], gripper_opening_m=q7[6])
        poses = urdf.fk(dict(zip(JOINT_NAMES, q7, strict=True)))
        for link, pose in poses.items():
            if link in sites:
                pos, rot = d.site_xpos[sites[link]], d.site_xmat[sites[link]].reshape(3, 3)
            else:
                body = m.body(link).id
                pos, rot = d.xpos[body], d.xmat[body].reshape(3, 3)
            np.testing.assert_allclose(pose[:3, 3], pos, atol=1e-6, err_msg=link)
            np.testing.assert_allclose(pose[:3, :3], rot, atol=1e-6, err_msg=link)
            checked += 1
    assert checked == 25 * len(urdf.links)


def test_urdf_inertials_match_mjcf(urdf, scene):
    m = scene.model
    for name, link in urdf.links.items():
        inertial = link.find("inertial")
        if inertial is None:
            continue
        body = m.body(name).id
        assert float(inertial.find("mass").get("value")) == pytest.approx(m.body_mass[body])
        np.testing.assert_allclose(_origin(inertial)[:3, 3], m.body_ipos[body], atol=1e-9)
        inertia = inertial.find("inertia")
        diag = [float(inertia.get(k)) for k in ("ixx", "iyy", "izz")]
        off = [float(inertia.get(k)) for k in ("ixy", "ixz", "iyz")]
        # MuJoCo stores principal moments in body_inertia with their frame in body_iquat.
        rot = transforms3d.quaternions.quat2mat(m.body_iquat[body])
        tensor = rot @ np.diag(m.body_inertia[body]) @ rot.T
        np.testing.assert_allclose(np.diag(tensor), diag, rtol=1e-6, atol=1e-12, err_msg=name)
        np.testing.assert_allclose([tensor[0, 1], tensor[0, 2], tensor[1, 2]], off, atol=1e-12)


def test_urdf_limits_and_damping_match_mjcf(urdf, scene):
    m = scene.model
    for i, name in enumerate(JOINT_NAMES + ("finger_left_joint",)):
        joint = urdf.joints[name]
        limit = joint.find("limit")
        jid = m.joint(name).id
        np.testing.assert_allclose([float(limit.get("lower")), float(limit.get("upper"))],
                                   m.jnt_range[jid], atol=1e-9, err_msg=name)
        damping = float(joint.find("dynamics").get("damping"))
        assert damping == pytest.approx(m.dof_damping[m.jnt_dofadr[jid]]), name
        if name in ARM_JOINT_NAMES:
            act = m.actuator(name).id
            assert float(limit.get("effort")) == pytest.approx(m.actuator_ctrlrange[act, 1])
            assert float(limit.get("velocity")) == pytest.approx(scene.velocity_limits_rad_s[i])
    grip = m.actuator("gripper").id
    assert float(urdf.joints["gripper_joint"].find("limit").get("effort")) == pytest.approx(
        m.actuator_forcerange[grip, 1])


def test_mjcf_effort_limits_are_ur5e(scene):
    np.testing.assert_allclose(scene.effort_limits_nm[:, 1], [150, 150, 150, 28, 28, 28])
    np.testing.assert_allclose(scene.effort_limits_nm[:, 0], [-150, -150, -150, -28, -28, -28])
    np.testing.assert_allclose(scene.velocity_limits_rad_s, np.pi, atol=1e-6)
    # The clamp of user torque + gravity compensation is the same effort limit.
    ids = [scene.model.joint(n).id for n in ARM_JOINT_NAMES]
    np.testing.assert_allclose(scene.model.jnt_actfrcrange[ids], scene.effort_limits_nm)
    assert all(scene.model.jnt_actgravcomp[ids])
    assert mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_EQUALITY, "finger_centring") >= 0
