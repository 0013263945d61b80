"""dpr replay: the policy offline over recorded bags, scored against the recording."""

import json
import math
import re
import shutil

import numpy as np
import pytest
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from diffusion_policy_ros.cli import main
from diffusion_policy_ros.learning import bag_messages as bm
from diffusion_policy_ros.learning.collect import episode_name
from diffusion_policy_ros.learning.episode_bag import (
    TOPIC_CAMERA_INFO,
    TOPIC_DEPTH,
    TOPIC_INSTRUCTION,
    TOPIC_JOINT_STATES,
    TOPIC_RGB,
)
from diffusion_policy_ros.learning.replay import (
    PLOT_FILES,
    REPORT_FILE,
    ReplayOptions,
    chunk_discontinuity,
    default_report_dir,
    history_indices,
    query_indices,
    replay,
)

SEED = 21
RAW_TOPICS = (TOPIC_RGB, TOPIC_DEPTH, TOPIC_CAMERA_INFO, TOPIC_JOINT_STATES, TOPIC_INSTRUCTION)


@pytest.fixture(scope="module")
def recorded(tiny_demos, tiny_checkpoint):
    """One collected episode (with raw camera topics) and a tiny checkpoint trained on it."""
    return tiny_demos / episode_name(SEED), tiny_checkpoint


def _raw_only_copy(src, dst):
    """What `ros2 bag record` on the robot gives: Kinect + joint_states + instruction (sqlite3)."""
    with Reader(src) as reader, Writer(dst, version=9,
                                       storage_plugin=StoragePlugin.SQLITE3) as writer:
        conns = {c.topic: writer.add_connection(c.topic, c.msgtype, typestore=bm.TYPESTORE)
                 for c in reader.connections if c.topic in RAW_TOPICS}
        for conn, t_ns, raw in reader.messages():
            if conn.topic in conns:
                writer.write(conns[conn.topic], t_ns, raw)


def _finite(values) -> bool:
    return all(math.isfinite(v) for v in values)


def test_report_on_a_collected_bag_and_force(recorded, tmp_path, capsys):
    bag, ckpt = recorded
    report_dir = tmp_path / "report"
    result = replay(ReplayOptions(bag=bag, checkpoint=ckpt, report_dir=report_dir))
    report = json.loads((report_dir / REPORT_FILE).read_text())
    assert report["action_source"] == "chunks" and report["chunks"] == report["observations"]
    for group in ("arm_rad", "gripper_m"):
        per_step = report["action_error"][group]["per_step"]
        assert len(per_step) == 16 and _finite(per_step)
    agree = report["gripper_agreement"]["per_step"]
    assert len(agree) == 16 and all(0.0 <= a <= 1.0 for a in agree)
    lat = report["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"] and len(lat["per_chunk"]) == report["chunks"]
    disc = report["discontinuity"]
    assert disc["pairs"] == report["chunks"] - 1
    assert math.isfinite(disc["overlap_max_arm_rad"]["max"])
    np.testing.assert_allclose(np.abs(result.predicted - result.recorded).mean(axis=0)[:, 6],
                               report["action_error"]["gripper_m"]["per_step"])
    for name in PLOT_FILES:
        assert (report_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = (report_dir / REPORT_FILE).stat().st_mtime_ns
    argv = ["replay", "--bag", str(bag), "--checkpoint", str(ckpt), "--report", str(report_dir)]
    assert main(argv) == 2
    assert "--force" in capsys.readouterr().err
    assert (report_dir / REPORT_FILE).stat().st_mtime_ns == before
    assert main([*argv, "--force"]) == 0
    out = capsys.readouterr().out
    assert "predict latency ms" in out and str(report_dir) in out
    assert (report_dir / REPORT_FILE).stat().st_mtime_ns != before


def test_raw_camera_only_sqlite_bag(recorded, tmp_path):
    bag, ckpt = recorded
    raw = tmp_path / "robot_bag"
    _raw_only_copy(bag, raw)
    result = replay(ReplayOptions(bag=raw, checkpoint=ckpt))
    assert result.report_dir == default_report_dir(raw) == tmp_path / "robot_bag_replay"
    report = json.loads((result.report_dir / REPORT_FILE).read_text())
    assert report["action_source"] == "joint_states" and report["chunks"] > 5
    assert _finite(report["action_error"]["arm_rad"]["per_step"])


def test_bad_bags_and_checkpoints_exit_2(recorded, tmp_path, capsys):
    bag, ckpt = recorded
    broken = tmp_path / "truncated"
    shutil.copytree(bag, broken)
    mcap = next(broken.glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 3])
    assert main(["replay", "--bag", str(broken), "--checkpoint", str(ckpt)]) == 2
    assert re.search("truncated|corrupt|cannot open", capsys.readouterr().err)
    no_topics = tmp_path / "only_instruction"
    with Reader(bag) as reader, Writer(no_topics, version=9) as writer:
        conn = next(c for c in reader.connections if c.topic == TOPIC_INSTRUCTION)
        out = writer.add_connection(conn.topic, conn.msgtype, typestore=bm.TYPESTORE)
        for _, t_ns, raw in reader.messages(connections=[conn]):
            writer.write(out, t_ns, raw)
    assert main(["replay", "--bag", str(no_topics), "--checkpoint", str(ckpt)]) == 2
    assert "missing required topics" in capsys.readouterr().err
    assert main(["replay", "--bag", str(bag), "--checkpoint", str(tmp_path / "none"),
                 "--report", str(tmp_path / "r")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not default_report_dir(broken).exists()


def test_schedule_history_and_discontinuity():
    stamps = (np.arange(31) * 33_333_333).astype(np.int64)  # 30 Hz camera, 1 s
    q = query_indices(stamps, 0.1)
    assert np.all(np.abs(np.diff(stamps[q]) - 100_000_000) < 20_000_000) and len(q) == 11
    assert history_indices(stamps, int(q[3]), 2, 0.1) == [int(q[2]), int(q[3])]
    assert history_indices(stamps, 0, 2, 0.1) == [0, 0]
    dt, t = 0.1, np.arange(16) * 0.1
    chunk_stamps = (np.arange(4) * 1e8).astype(np.int64)
    line = np.stack([np.stack([np.full(7, s * 1e-9) + t[:, None][k] for k in range(16)])
                     for s in chunk_stamps])  # one straight line seen from each stamp
    disc = chunk_discontinuity(chunk_stamps, line, dt)
    assert disc["pairs"] == 3 and disc["overlap_max_arm_rad"]["max"] < 1e-9
    line[2] += 0.05
    disc = chunk_discontinuity(chunk_stamps, line, dt)
    assert disc["overlap_max_arm_rad"]["max"] == pytest.approx(0.05)
    assert disc["switch_jump_gripper_m"]["max"] == pytest.approx(0.05)


def test_fully_qualified_topic_names_from_ros2_bag_record(recorded, tmp_path):
    bag, ckpt = recorded
    robot = tmp_path / "robot_bag"
    with Reader(bag) as reader, Writer(robot, version=9) as writer:
        conns = {c.topic: writer.add_connection("/" + c.topic, c.msgtype, typestore=bm.TYPESTORE)
                 for c in reader.connections if c.topic in RAW_TOPICS}
        for conn, t_ns, raw in reader.messages():
            if conn.topic in conns:
                writer.write(conns[conn.topic], t_ns, raw)
    report = replay(ReplayOptions(bag=robot, checkpoint=ckpt)).report
    assert report["action_source"] == "joint_states"


def test_replay_predicts_what_the_policy_predicts_in_process(recorded, tmp_path):
    """Replay of a collected bag == the policy on the live in-process episode.

    The episode is re-run in process with the same seed and the same expert
    (the sim is deterministic), and the policy is asked for a chunk at every
    control period with the seed replay uses for that chunk: recorded
    observations, the history chosen by stamp, and the bag round trip must
    then give the very same chunks.
    """
    import collections
    import dataclasses

    from diffusion_policy_ros.policy.runner import PolicyRunner
    from diffusion_policy_ros.sim.env import GraspEnv
    from diffusion_policy_ros.sim.expert import ScriptedExpert
    from diffusion_policy_ros.sim.scene import JOINT_NAMES
    from diffusion_policy_ros.sim.sim_config import load_sim_config

    bag, checkpoint = recorded
    result = replay(ReplayOptions(bag=bag, checkpoint=checkpoint, report_dir=tmp_path / "r",
                                  seed=100, progress=False))
    runner = PolicyRunner.from_checkpoint(checkpoint, joint_names=list(JOINT_NAMES),
                                          device="cpu", num_threads=1)
    config = dataclasses.replace(load_sim_config(), render_observations=True)
    n_chunks = 12
    with GraspEnv(config) as env:
        obs, info = env.reset(SEED)
        expert = ScriptedExpert(env.runtime.scene.model)
        expert.reset(info["task"].target)
        history = collections.deque([obs] * runner.config.n_obs_steps,
                                    maxlen=runner.config.n_obs_steps)
        for n in range(n_chunks):
            live = runner.predict(list(history), obs["instruction"], noise=100 + n)
            np.testing.assert_allclose(live, result.predicted[n], atol=1e-5,
                                       err_msg=f"chunk {n}")
            obs = env.step(expert.act(env.runtime.scene), obs["stamp_s"])[0]
            history.append(obs)
