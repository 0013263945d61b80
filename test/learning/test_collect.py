"""dpr collect: expert episodes recorded as bags and read back as training data."""

import dataclasses
import json

import numpy as np
import pytest

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT
from diffusion_policy_ros.learning.collect import (
    FAILED_DIR,
    RecoveryConfig,
    SwitchConfig,
    collect,
    episode_name,
)
from diffusion_policy_ros.learning.dataset import tool_positions
from diffusion_policy_ros.learning.episode_bag import read_episode
from diffusion_policy_ros.sim.pushes import PushConfig


def _tracking_error_rad(ep) -> float:
    """Largest gap between a measured arm state and where the chunk one control
    period earlier put it (its row 1)."""
    return float(np.abs(ep.joint_positions[1:, :6] - ep.actions[:-1, 1, :6]).max())


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    report = collect(2, out, seed=3, raw_camera=True, progress=False)
    return out, report


def test_collect_writes_one_bag_per_successful_episode(collected):
    out, report = collected
    assert report.episodes == 2 and report.succeeded == 2 and not report.failed_seeds
    assert report.bytes_on_disk > 0 and report.realtime_factor > 0
    for seed in (3, 4):
        ep = read_episode(out / episode_name(seed))
        assert ep.outcome["success"] and ep.outcome["seed"] == seed
        assert ep.action_source == "chunks" and ep.actions.shape == (len(ep), 16, 7)
        assert ep.images.shape[1:] == (128, 128, 3) and ep.points.shape[1:] == (1024, 3)
        # Row 0 of each expert chunk starts at the measured arm state.
        np.testing.assert_allclose(ep.actions[:, 0, :6], ep.joint_positions[:, :6], atol=1e-6)
        assert np.all(np.diff(ep.stamps_ns) == 100_000_000)


def test_failed_expert_episodes_are_kept_apart_counted_and_never_read_as_data(tmp_path):
    from diffusion_policy_ros.learning.dataset import episode_dirs
    from diffusion_policy_ros.sim.sim_config import SimConfig

    # 1 s is too short for any grasp: both episodes time out.
    report = collect(2, tmp_path, seed=3, progress=False, config=SimConfig(time_limit_s=1.0))
    assert report.succeeded == 0 and report.failed_seeds == [3, 4]
    for seed in (3, 4):
        assert not (tmp_path / episode_name(seed)).exists()
        ep = read_episode(tmp_path / FAILED_DIR / episode_name(seed))
        assert ep.outcome["timed_out"] and not ep.outcome["success"]
    with pytest.raises(FileNotFoundError, match="no episode"):
        episode_dirs(tmp_path)
    # The failures are already recorded: the same seeds are never written again.
    with pytest.raises(FileExistsError):
        collect(1, tmp_path, seed=4, progress=False)


def test_raw_camera_topics_reproduce_the_recorded_observations(collected, tmp_path):
    out, _ = collected
    recorded = read_episode(out / episode_name(3))
    # Drop the observation topics: what remains is what `ros2 bag record` of the
    # Kinect driver + joint_states + instruction gives on a real robot (fully qualified
    # topic names, MCAP storage; test_replay covers sqlite3).
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer

    from diffusion_policy_ros.learning import bag_messages as bm

    raw_only = tmp_path / "raw_only"
    keep = {"camera/rgb/image_raw", "camera/depth_to_rgb/image_raw", "camera/rgb/camera_info",
            "joint_states", "instruction"}
    with Reader(out / episode_name(3)) as reader, \
            Writer(raw_only, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {}
        for conn in reader.connections:
            if conn.topic in keep:
                conns[conn.id] = writer.add_connection("/" + conn.topic, conn.msgtype,
                                                       typestore=bm.TYPESTORE)
        for conn, t, raw in reader.messages():
            if conn.id in conns:
                writer.write(conns[conn.id], t, raw)
    assert list(raw_only.glob("*.mcap"))
    replayed = read_episode(raw_only)
    assert replayed.action_source == "joint_states"
    np.testing.assert_array_equal(replayed.stamps_ns, recorded.stamps_ns)
    np.testing.assert_array_equal(replayed.points, recorded.points)
    np.testing.assert_array_equal(replayed.images, recorded.images)


def test_recorded_episodes_are_never_overwritten(collected):
    out, _ = collected
    with pytest.raises(FileExistsError, match="never overwritten"):
        collect(1, out, seed=4, progress=False)


def test_pushed_episodes_record_the_experts_corrections(collected, tmp_path):
    out, _ = collected
    report = collect(1, tmp_path, seed=3, progress=False,
                     pushes=PushConfig(gap_s=(0.2, 0.2), max_pushes=2))
    ep = read_episode(tmp_path / (FAILED_DIR if report.failed_seeds else "") / episode_name(3))
    assert ep.outcome["pushes"] >= 1 and max(ep.outcome["max_push_nm"]) > 0
    # Still the commands, replanned from the measured (now displaced) state.
    np.testing.assert_allclose(ep.actions[:, 0, :6], ep.joint_positions[:, :6], atol=1e-6)
    clean = read_episode(out / episode_name(3))
    assert _tracking_error_rad(ep) > 0.02 > _tracking_error_rad(clean)


def test_switched_episodes_go_for_the_first_object_then_turn_to_the_new_one(tmp_path):
    from diffusion_policy_ros.sim.env import GraspEnv
    from diffusion_policy_ros.sim.task import parse_instruction

    report = collect(2, tmp_path, seed=40000, progress=False,
                     switches=SwitchConfig(earliest_s=0.6, latest_s=0.6))
    assert report.succeeded == 2, report
    with GraspEnv() as env:
        env.reset(40000)
        scene = env.runtime.scene
        where = {n: scene.object_position(n)[:2] for n in scene.object_names}
    ep = read_episode(tmp_path / episode_name(40000))
    o = ep.outcome
    assert o["success"] and o["first_target"] != o["target"] and o["switch_s"] == 0.6
    names = list(where)
    assert parse_instruction(o["first_instruction"], names) == o["first_target"]
    assert parse_instruction(ep.instruction, names) == o["target"]
    # The instruction in force changes at the switch frame, and stays changed.
    k = ep.frame_instructions.index(ep.instruction)
    assert ep.frame_instructions[:k] == [o["first_instruction"]] * k
    assert set(ep.frame_instructions[k:]) == {ep.instruction}
    assert (ep.stamps_ns[k] - ep.stamps_ns[0]) * 1e-9 == pytest.approx(0.6, abs=1e-6)
    # Until the switch the tool heads for the first object; at the end it is at the new one.
    tool = tool_positions(ep.joint_positions)[:, :2]
    first, final = where[o["first_target"]], where[o["target"]]
    assert np.linalg.norm(tool[k] - first) < np.linalg.norm(tool[0] - first) - 0.05
    assert np.linalg.norm(tool[-1] - final) < 0.03


def test_recovery_episodes_record_only_the_experts_part_after_the_policy(tmp_path):
    recovery = RecoveryConfig(str(SHIPPED_CHECKPOINT), earliest_s=0.5, latest_s=0.5)
    report = collect(2, tmp_path, seed=60000, progress=False,
                     switches=SwitchConfig(earliest_s=0.4, latest_s=0.4), recovery=recovery)
    assert report.succeeded == 2, report
    for seed in (60000, 60001):
        ep = read_episode(tmp_path / episode_name(seed))
        o = ep.outcome
        assert o["recovery_checkpoint"] == str(SHIPPED_CHECKPOINT)
        assert o["handover"] in ("time", "closing")
        assert o["expert_phase_at_handover"] in ("pre_grasp", "descend")
        # Nothing before the hand-over is recorded; from there on the episode's own
        # instruction is in force (the first object's one belonged to the policy's part).
        assert o["handover_s"] <= 0.4 + 0.5 + 1e-6 and o["switch_s"] <= o["handover_s"]
        assert ep.stamps_ns[0] * 1e-9 == pytest.approx(o["handover_s"], abs=1e-6)
        assert set(ep.frame_instructions) == {ep.instruction} != {o["first_instruction"]}
        assert ep.follows_last_instruction(0)
        assert len(ep.actions) == len(ep.stamps_ns) > 10


def test_recovery_needs_a_checkpoint(tmp_path):
    with pytest.raises(Exception, match="checkpoint|not found|No such"):
        collect(1, tmp_path, seed=60000, progress=False,
                recovery=RecoveryConfig(str(tmp_path / "missing")))


def test_varied_scenes_with_descriptions_record_words_that_name_the_object_alone(tmp_path):
    from diffusion_policy_ros.instructions.referring import parse_reference, resolve
    from diffusion_policy_ros.sim.env import GraspEnv
    from diffusion_policy_ros.sim.sim_config import SimConfig

    config = SimConfig(object_set="varied")
    report = collect(2, tmp_path, seed=1007, progress=False, config=config, descriptions=1.0)
    assert report.succeeded == 2, report
    summary = json.loads((tmp_path / "collection_001007.json").read_text())
    assert (summary["descriptions"], summary["object_set"]) == (1.0, "varied")
    with GraspEnv(dataclasses.replace(config, render_observations=False)) as env:
        for seed in (1007, 1008):
            ep = read_episode(tmp_path / episode_name(seed))
            env.reset(seed)
            objects = env.runtime.referents()
            target = ep.outcome["target"]
            assert resolve(parse_reference(ep.instruction), objects).target == target
            assert target.split("_")[0] not in ep.instruction.split(), ep.instruction
    with pytest.raises(ValueError, match="share"):
        collect(1, tmp_path / "x", seed=1, progress=False, descriptions=2.0)
