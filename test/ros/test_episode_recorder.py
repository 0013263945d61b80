"""``dpr bringup --out``'s recorder on live topics (real DDS): a 30 Hz camera becomes a
10 frames/s GIF with the predicted path, joint signals a 50 Hz plot, and the recorder
wakes the executor only for its timers and the action chunks."""

import time

import numpy as np
from PIL import Image as PilImage
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import Marker, MarkerArray

from diffusion_policy_ros.perception.geometry import CameraModel
from diffusion_policy_ros.ros.conversions import camera_info_msg, rgb8_image_msg
from diffusion_policy_ros.ros.episode_recorder import PATH_MARKER_NS, EpisodeMediaRecorder
from diffusion_policy_ros.sim.scene import JOINT_NAMES

CAMERA = CameraModel(640, 360, (500.0, 0.0, 320.0, 0.0, 500.0, 180.0, 0.0, 0.0, 1.0),
                     "plumb_bob", (0.0,) * 5)
CAMERA_PERIOD_S, JOINT_PERIOD_S, RECORD_S = 1 / 30, 0.002, 1.5


def test_a_30_hz_camera_becomes_10_frames_per_second_and_signals_50_hz(ros, tmp_path):
    node = ros.node
    recorder = EpisodeMediaRecorder(node)
    pubs = {
        "image": node.create_publisher(Image, "camera/rgb/image_raw", qos_profile_sensor_data),
        "info": node.create_publisher(CameraInfo, "camera/rgb/camera_info",
                                      qos_profile_sensor_data),
        "joints": node.create_publisher(JointState, "joint_states", qos_profile_sensor_data),
        "reference": node.create_publisher(JointState, "tracker/reference",
                                           qos_profile_sensor_data),
        "markers": node.create_publisher(MarkerArray, "policy/markers", QoSProfile(depth=5)),
        "chunk": node.create_publisher(JointTrajectory, "policy/action_chunk",
                                       QoSProfile(depth=10)),
    }
    ros.spin_until(lambda: all(p.get_subscription_count() == 1 for p in pubs.values()),
                   10.0, "the recorder's subscriptions")
    path = Marker(ns=PATH_MARKER_NS)
    path.points = [path.pose.position] * 4  # any points: the GIF draws whatever is there
    rgb = np.zeros((360, 640, 3), np.uint8)
    recorder.start()
    start = time.monotonic()
    next_frame = next_joint = next_reference = start
    chunks = 0
    while (now := time.monotonic()) - start < RECORD_S:
        header = Header(stamp=node.get_clock().now().to_msg())
        if now >= next_frame:
            rgb[:] = 40 + chunks % 200  # distinct pictures: a GIF merges equal ones
            pubs["image"].publish(rgb8_image_msg(rgb, header))
            pubs["info"].publish(camera_info_msg(CAMERA, header))
            pubs["markers"].publish(MarkerArray(markers=[path]))
            pubs["chunk"].publish(JointTrajectory(header=header, joint_names=JOINT_NAMES))
            chunks += 1
            next_frame += CAMERA_PERIOD_S
        if now >= next_joint:
            pubs["joints"].publish(JointState(header=header, name=JOINT_NAMES,
                                              position=[0.1] * len(JOINT_NAMES)))
            next_joint += JOINT_PERIOD_S
        if now >= next_reference:
            pubs["reference"].publish(JointState(header=header, name=JOINT_NAMES[:-1],
                                                 position=[0.2] * (len(JOINT_NAMES) - 1)))
            next_reference += 0.02
        ros.executor.spin_once(timeout_sec=0.0005)
    rec = recorder.recording
    frames_s = [f.t_s for f in rec.frames]
    # The newest frame every 0.1 s: about 10 a second, never two within half a period.
    assert 0.6 * RECORD_S / 0.1 <= len(frames_s) <= RECORD_S / 0.1 + 1, frames_s
    assert min(np.diff(frames_s)) >= 0.05 - 1e-6, frames_s
    assert rec.path_base_m is not None and recorder.camera is not None
    # The newest sample every 0.02 s, never two within half a period; the reference is
    # published at the timer's own period, where a sampler without slack keeps every other.
    for t_s in (rec.trace.t_measured_s, rec.trace.t_reference_s):
        assert 0.5 * RECORD_S / 0.02 <= len(t_s) <= RECORD_S / 0.02 + 1, t_s
        assert min(np.diff(t_s)) >= 0.01 - 1e-6, t_s
    assert np.isnan(rec.trace.reference[-1][-1])  # the reference has no gripper
    assert 0 < len(rec.trace.chunk_arrival_s) <= chunks
    # 500 Hz joint_states and 30 Hz images were read once per timer tick, not per message.
    assert recorder.joint_states.taken_total <= RECORD_S / 0.02 + 5
    assert recorder.images.taken_total <= RECORD_S / 0.1 + 2
    written = recorder.finish(tmp_path, "episode", title="t", caption="done")
    with PilImage.open(written["gif"]) as gif:
        assert gif.n_frames == len(frames_s)
    assert PilImage.open(written["plot"]).size[0] > 500
    assert recorder.recording is None
