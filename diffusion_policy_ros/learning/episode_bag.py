"""One episode = one rosbag2 (MCAP, zstd chunks): writing it and reading it back.

A bag holds what a real robot would record, under the topics of
ARCHITECTURE.md: ``observation/image`` + ``observation/points`` (as
``rgbd_sync_node`` publishes them), ``joint_states``, ``instruction``,
``policy/action_chunk`` (the commanded chunks) and ``episode/outcome``
(std_msgs/String holding JSON), optionally also the raw camera topics.

``read_episode`` accepts those bags and bags recorded on a real robot with
``ros2 bag record`` that only have the raw Kinect topics: it then runs the
same sync buffer and perception pipeline as the node over them. Action
targets come from the recorded chunk conditioned on each observation when
there is one, otherwise from the joint positions that followed it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Connection
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer

from diffusion_policy_ros.errors import InputError
from diffusion_policy_ros.learning import bag_messages as bm
from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.perception.image_decoding import FrameRejected, RawImage
from diffusion_policy_ros.perception.pipeline import RgbdObservationPipeline, RgbdSyncConfig
from diffusion_policy_ros.perception.sync_buffer import RgbdSyncBuffer

TOPIC_IMAGE = "observation/image"
TOPIC_POINTS = "observation/points"
TOPIC_JOINT_STATES = "joint_states"
TOPIC_INSTRUCTION = "instruction"
TOPIC_ACTION_CHUNK = "policy/action_chunk"
TOPIC_OUTCOME = "episode/outcome"
TOPIC_RGB = "camera/rgb/image_raw"
TOPIC_DEPTH = "camera/depth_to_rgb/image_raw"
TOPIC_CAMERA_INFO = "camera/rgb/camera_info"

JOINT_NAMES = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint")


class BagError(RuntimeError, InputError):
    """A bag that cannot be read as an episode (corrupt, truncated, missing topics)."""


class EpisodeBagWriter:
    """Writes one episode; use as a context manager. Timestamps are in ns."""

    _TOPICS = {TOPIC_IMAGE: bm.IMAGE, TOPIC_POINTS: bm.POINT_CLOUD2,
               TOPIC_JOINT_STATES: bm.JOINT_STATE, TOPIC_INSTRUCTION: bm.STRING,
               TOPIC_ACTION_CHUNK: bm.JOINT_TRAJECTORY, TOPIC_OUTCOME: bm.STRING}
    _RAW_TOPICS = {TOPIC_RGB: bm.IMAGE, TOPIC_DEPTH: bm.IMAGE, TOPIC_CAMERA_INFO: bm.CAMERA_INFO}

    def __init__(self, path: str | Path, raw_camera: bool = False, base_frame: str = "base_link",
                 camera_frame: str = "rgb_camera_link"):
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists; episodes are never overwritten")
        self.base_frame, self.camera_frame = base_frame, camera_frame
        self.raw_camera = raw_camera
        self._writer = Writer(self.path, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._connections: dict[str, Connection] = {}

    def __enter__(self) -> EpisodeBagWriter:
        self._writer.open()
        topics = dict(self._TOPICS)
        if self.raw_camera:
            topics |= self._RAW_TOPICS
        for topic, msgtype in topics.items():
            self._connections[topic] = self._writer.add_connection(topic, msgtype,
                                                                   typestore=bm.TYPESTORE)
        return self

    def __exit__(self, *exc) -> None:
        self._writer.close()

    def _write(self, topic: str, stamp_ns: int, msg) -> None:
        self._writer.write(self._connections[topic], int(stamp_ns), bm.serialize(msg))

    def instruction(self, stamp_ns: int, text: str) -> None:
        self._write(TOPIC_INSTRUCTION, stamp_ns, bm.string(text))

    def joint_state(self, stamp_ns: int, position, velocity, effort,
                    names=JOINT_NAMES) -> None:
        self._write(TOPIC_JOINT_STATES, stamp_ns,
                    bm.joint_state(names, position, velocity, effort, stamp_ns))

    def observation(self, stamp_ns: int, image_rgb: np.ndarray, points: np.ndarray,
                    colors: np.ndarray) -> None:
        self._write(TOPIC_IMAGE, stamp_ns, bm.rgb8_image(image_rgb, stamp_ns, self.camera_frame))
        self._write(TOPIC_POINTS, stamp_ns,
                    bm.xyzrgb_cloud(points, colors, stamp_ns, self.base_frame))

    def raw_camera_frame(self, stamp_ns: int, color: RawImage, depth: RawImage, camera) -> None:
        self._write(TOPIC_CAMERA_INFO, stamp_ns, bm.camera_info(camera, stamp_ns,
                                                                 self.camera_frame))
        self._write(TOPIC_RGB, stamp_ns, bm.image(color, stamp_ns, self.camera_frame))
        self._write(TOPIC_DEPTH, stamp_ns, bm.image(depth, stamp_ns, self.camera_frame))

    def action_chunk(self, stamp_ns: int, positions: np.ndarray, dt_s: float,
                     names=JOINT_NAMES) -> None:
        self._write(TOPIC_ACTION_CHUNK, stamp_ns,
                    bm.joint_trajectory(names, positions, dt_s, stamp_ns))

    def outcome(self, stamp_ns: int, outcome: dict) -> None:
        self._write(TOPIC_OUTCOME, stamp_ns, bm.string(json.dumps(outcome, sort_keys=True)))


@dataclasses.dataclass
class EpisodeRecord:
    """An episode as arrays, one row per observation (time order)."""

    path: Path
    instruction: str
    outcome: dict
    stamps_ns: np.ndarray
    """(N,) int64 observation stamps."""
    images: np.ndarray
    """(N, H, W, 3) uint8 RGB."""
    points: np.ndarray
    """(N, P, 3) float32, base_link (m)."""
    colors: np.ndarray
    """(N, P, 3) uint8."""
    joint_positions: np.ndarray
    """(N, 7) latest joint_states at or before each observation (rad, gripper m)."""
    actions: np.ndarray
    """(N, T, 7) action targets for each observation."""
    action_source: str
    """'chunks' (recorded commands) or 'joint_states' (positions that followed)."""
    frame_instructions: list[str] = dataclasses.field(default_factory=list)
    """The instruction in force at each observation: the latest at or before its stamp
    (an instruction switch mid-episode changes it; ``instruction`` is the last one).
    Empty: ``instruction`` throughout."""

    def __len__(self) -> int:
        return int(self.stamps_ns.shape[0])

    def instruction_at(self, i: int) -> str:
        """The instruction the robot had been given when observation ``i`` was taken."""
        return self.frame_instructions[i] if self.frame_instructions else self.instruction

    def follows_last_instruction(self, i: int) -> bool:
        """Observation ``i`` is under the final instruction (the one the grasp obeyed)."""
        return self.instruction_at(i) == self.instruction


def open_bag(path: Path) -> Reader:
    """An opened rosbag2 reader (sqlite3 or MCAP); ``BagError`` when it is not one."""
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    try:
        reader = Reader(path)
        reader.open()
    except Exception as exc:  # rosbags raises several types for damaged bags
        raise BagError(f"{path}: cannot open as rosbag2: {exc}") from exc
    return reader


def bag_topics(path: str | Path) -> list[str]:
    """The topics a bag holds, without a leading "/" (``BagError`` when it is no bag)."""
    reader = open_bag(Path(path))
    try:
        return sorted({c.topic.lstrip("/") for c in reader.connections})
    finally:
        reader.close()


def read_depth_frames(path: str | Path, max_frames: int | None = None
                      ) -> list[tuple[CameraModel, RawImage]]:
    """The recorded depth images (``camera/depth_to_rgb/image_raw``), each with the
    latest ``camera/rgb/camera_info`` before it, in bag order; up to ``max_frames``.
    Other topics are not deserialised. ``BagError`` for a bag without them."""
    path = Path(path)
    camera, frames = None, []
    for topic, _, msg in _messages(path, (TOPIC_DEPTH, TOPIC_CAMERA_INFO)):
        if topic == TOPIC_CAMERA_INFO:
            camera = bm.camera_model(msg)
        elif camera is not None:
            frames.append((camera, bm.raw_image(msg)))
            if max_frames is not None and len(frames) >= max_frames:
                break
    if not frames:
        raise BagError(f"{path}: no {TOPIC_DEPTH} frame after a {TOPIC_CAMERA_INFO} (record "
                       f"both, e.g. dpr collect --raw-camera or ros2 bag record)")
    return frames


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """What ``replay.launch.py`` plays from a bag and whether perception runs on it."""

    topics: tuple[str, ...]
    perception: bool
    """True: raw Kinect topics go to rgbd_sync_node; False: the recorded observations
    go to policy_node directly."""
    note: str = ""


def replay_plan(topics) -> ReplayPlan:
    """Raw camera topics when the bag has them (``--raw-camera``, ``ros2 bag record`` on a
    robot), else the recorded ``observation/*`` (what plain ``dpr collect`` writes), plus
    ``joint_states`` and ``instruction``. ``BagError`` when it has neither."""
    names = {t.lstrip("/") for t in topics}
    raw = (TOPIC_RGB, TOPIC_CAMERA_INFO, TOPIC_DEPTH)
    if TOPIC_JOINT_STATES not in names:
        raise BagError(f"the bag has no {TOPIC_JOINT_STATES} (topics: {sorted(names)})")
    extra = (TOPIC_JOINT_STATES,) + ((TOPIC_INSTRUCTION,) if TOPIC_INSTRUCTION in names else ())
    note = "" if TOPIC_INSTRUCTION in names else (
        f"the bag has no {TOPIC_INSTRUCTION}: the policy acts once one is published")
    if all(t in names for t in raw):
        return ReplayPlan(raw + extra, True, note)
    if TOPIC_IMAGE in names and TOPIC_POINTS in names:
        return ReplayPlan((TOPIC_IMAGE, TOPIC_POINTS) + extra, False, note)
    raise BagError(f"the bag has neither the raw camera topics {list(raw)} nor "
                   f"{TOPIC_IMAGE} + {TOPIC_POINTS} (topics: {sorted(names)})")


def _messages(path: Path, topics=None):
    """(topic without a leading "/", bag time ns, message) in bag order, of ``topics``
    only when given (the others are not deserialised); ``BagError`` for unknown types
    and for a corrupt or truncated bag."""
    reader = open_bag(path)
    try:
        # `ros2 bag record` stores fully qualified names (/joint_states).
        wanted = [c for c in reader.connections
                  if topics is None or c.topic.lstrip("/") in topics]
        for conn, t_ns, raw in reader.messages(connections=wanted) if wanted else ():
            try:
                msg = bm.deserialize(raw, conn.msgtype)
            except KeyError as exc:
                raise BagError(f"{path}: topic {conn.topic} has unknown message type "
                               f"{conn.msgtype}") from exc
            yield conn.topic.lstrip("/"), int(t_ns), msg
    except BagError:
        raise
    except Exception as exc:
        raise BagError(f"{path}: corrupt or truncated bag: {exc}") from exc
    finally:
        reader.close()


def _read_messages(path: Path) -> dict[str, list[tuple[int, Any]]]:
    by_topic: dict[str, list[tuple[int, Any]]] = {}
    for topic, t_ns, msg in _messages(path):
        by_topic.setdefault(topic, []).append((t_ns, msg))
    return by_topic


def _observations_from_raw_camera(topics, config: RgbdSyncConfig):
    """Run the node's sync buffer and pipeline over recorded raw Kinect topics."""
    pipeline = RgbdObservationPipeline(config)
    buffer = RgbdSyncBuffer(config.max_skew_s, config.max_age_s, config.buffer_capacity,
                            config.clock_jump_s)
    events = [(bm.stamp_ns_of(m), 0, "info", m) for _, m in topics[TOPIC_CAMERA_INFO]]
    events += [(bm.stamp_ns_of(m), 1, "color", m) for _, m in topics[TOPIC_RGB]]
    events += [(bm.stamp_ns_of(m), 1, "depth", m) for _, m in topics[TOPIC_DEPTH]]
    out = []
    for stamp, _, stream, msg in sorted(events, key=lambda e: (e[0], e[1])):
        if stream == "info":
            with contextlib.suppress(FrameRejected):
                pipeline.set_camera(bm.camera_model(msg))
            continue
        add = buffer.add_color if stream == "color" else buffer.add_depth
        for pair in add(stamp, msg):
            try:
                obs = pipeline.process(bm.raw_image(pair.color), bm.raw_image(pair.depth))
            except FrameRejected:
                continue
            out.append((pair.stamp_ns, obs.image_rgb, obs.points, obs.colors))
    return out


def _observations_from_topics(topics):
    clouds = {bm.stamp_ns_of(m): m for _, m in topics[TOPIC_POINTS]}
    out = []
    for _, img in topics[TOPIC_IMAGE]:
        stamp = bm.stamp_ns_of(img)
        cloud = clouds.get(stamp)
        if cloud is None:
            continue
        raw = bm.raw_image(img)
        rgb = np.frombuffer(raw.data, np.uint8).reshape(raw.height, raw.step)[:, : raw.width * 3]
        points, colors = bm.xyzrgb_from_cloud(cloud)
        out.append((stamp, rgb.reshape(raw.height, raw.width, 3).copy(), points, colors))
    return out


def _joint_table(messages) -> tuple[np.ndarray, np.ndarray]:
    stamps, rows = [], []
    for _, msg in messages:
        index = {n: i for i, n in enumerate(msg.name)}
        if not all(n in index for n in JOINT_NAMES):
            continue
        stamps.append(bm.stamp_ns_of(msg))
        rows.append([float(msg.position[index[n]]) for n in JOINT_NAMES])
    if not stamps:
        raise BagError(f"joint_states never name all of {list(JOINT_NAMES)}")
    order = np.argsort(stamps, kind="stable")
    return np.asarray(stamps, dtype=np.int64)[order], np.asarray(rows)[order]


def _chunk_table(messages, horizon: int) -> dict[int, np.ndarray]:
    chunks = {}
    for _, msg in messages:
        index = {n: i for i, n in enumerate(msg.joint_names)}
        if len(msg.points) < horizon or not all(n in index for n in JOINT_NAMES):
            continue
        cols = [index[n] for n in JOINT_NAMES]
        chunks[bm.stamp_ns_of(msg)] = np.asarray(
            [[p.positions[c] for c in cols] for p in msg.points[:horizon]])
    return chunks


def read_episode(path: str | Path, horizon: int = 16, dt_s: float = 0.1,
                 perception: RgbdSyncConfig | None = None) -> EpisodeRecord:
    """Read one episode bag (see module docstring); raises ``BagError``."""
    path = Path(path)
    topics = _read_messages(path)
    has_obs = TOPIC_IMAGE in topics and TOPIC_POINTS in topics
    has_raw = all(t in topics for t in (TOPIC_RGB, TOPIC_DEPTH, TOPIC_CAMERA_INFO))
    missing = [t for t in (TOPIC_JOINT_STATES, TOPIC_INSTRUCTION) if t not in topics]
    if not (has_obs or has_raw):
        missing.append(f"{TOPIC_IMAGE} + {TOPIC_POINTS} or the raw camera topics")
    if missing:
        raise BagError(f"{path}: missing required topics: {missing}")
    if has_obs:
        observations = _observations_from_topics(topics)
    else:
        observations = _observations_from_raw_camera(topics, perception or RgbdSyncConfig())
    if not observations:
        raise BagError(f"{path}: no usable observation in the bag")
    observations.sort(key=lambda o: o[0])
    stamps = np.asarray([o[0] for o in observations], dtype=np.int64)
    js_stamps, js_rows = _joint_table(topics[TOPIC_JOINT_STATES])
    idx = np.clip(np.searchsorted(js_stamps, stamps, side="right") - 1, 0, len(js_stamps) - 1)
    chunks = _chunk_table(topics.get(TOPIC_ACTION_CHUNK, []), horizon)
    if chunks and all(int(s) in chunks for s in stamps):
        actions, source = np.stack([chunks[int(s)] for s in stamps]), "chunks"
    else:
        future = stamps[:, None] + (np.arange(horizon) * dt_s * 1e9).astype(np.int64)[None, :]
        actions = np.stack([np.stack([np.interp(f, js_stamps, js_rows[:, j]) for j in
                                      range(len(JOINT_NAMES))], axis=-1) for f in future])
        source = "joint_states"
    outcome = {}
    if TOPIC_OUTCOME in topics:
        outcome = json.loads(topics[TOPIC_OUTCOME][-1][1].data)
    said = sorted(((s, m.data) for s, m in topics[TOPIC_INSTRUCTION]), key=lambda x: x[0])
    said_at = np.searchsorted(np.asarray([s for s, _ in said], np.int64), stamps, side="right")
    frame_instructions = [said[max(0, int(k) - 1)][1] for k in said_at]
    return EpisodeRecord(
        path=path, instruction=said[-1][1], outcome=outcome,
        stamps_ns=stamps, images=np.stack([o[1] for o in observations]),
        points=np.stack([o[2] for o in observations]).astype(np.float32),
        colors=np.stack([o[3] for o in observations]), joint_positions=js_rows[idx],
        actions=actions.astype(np.float32), action_source=source,
        frame_instructions=frame_instructions)
