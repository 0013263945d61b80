"""The package's Fast DDS profiles: the control topics' readers listen on UDP loopback,
and the camera images' lost fragments are repaired at once.

Fast DDS's shared-memory transport lets a stopped or killed subscriber process hold
the publisher's ``publish()`` (docs/explanation/safety.md); a ``data_reader`` profile named after
a topic moves that topic's readers off it. A 640 x 360 ``bgra8`` frame (921 kB) is
larger than what shared memory hands over at once, so some of its fragments are dropped
and sent again on the reader's request, and a reliable reader delivers the frame only
when it is whole: it waits for Fast DDS's default reply delays (5 ms before the reader
asks, 5 ms before the writer answers) on every frame. The camera topics' writer and
reader profiles set both delays to zero (docs/explanation/distillation.md, "the camera's lost
fragments",
measures it).
rmw_fastrtps looks profiles up by the fully
qualified topic name, so the names depend on the node's namespace and remaps: every
process of the package that starts ROS calls ``use_package_dds_profiles`` with its ROS
arguments before ``rclpy.init`` (Fast DDS reads the file when the first participant
is created). Without a namespace or a remap of a control topic that is the shipped
``config/fastdds_profiles.xml``; otherwise a file written for those names. A file the
user set in ``FASTDDS_DEFAULT_PROFILES_FILE`` is kept.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from diffusion_policy_ros.config import CONFIG_DIR

PROFILES_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"
PROFILES_FILE = CONFIG_DIR / "fastdds_profiles.xml"

#: What the control loop publishes from its loops (the arm's states, efforts, chunks,
#: the tracker's reference, log messages) and what every node reads (clock,
#: diagnostics), as the nodes name them (relative names resolve in the namespace).
CONTROL_TOPICS = ("joint_states", "arm_controller/commands", "gripper_controller/commands",
                  "policy/action_chunk", "tracker/reference", "/clock", "/diagnostics",
                  "/rosout")

#: The camera's image streams (``sim_node`` or the Kinect driver -> ``rgbd_sync_node``).
CAMERA_TOPICS = ("camera/rgb/image_raw", "camera/depth_to_rgb/image_raw")

_READER = ("    <data_reader profile_name=\"{name}\">\n"
           "      <unicastLocatorList><locator><udpv4><address>127.0.0.1</address></udpv4>"
           "</locator></unicastLocatorList>\n"
           "    </data_reader>\n")
_ZERO = "<sec>0</sec><nanosec>0</nanosec>"
_CAMERA = ("    <data_writer profile_name=\"{name}\">\n"
           f"      <times><nack_response_delay>{_ZERO}</nack_response_delay></times>\n"
           "    </data_writer>\n"
           "    <data_reader profile_name=\"{name}\">\n"
           f"      <times><heartbeat_response_delay>{_ZERO}</heartbeat_response_delay>"
           "</times>\n"
           "    </data_reader>\n")


def resolve(name: str, namespace: str) -> str:
    """``name`` as a fully qualified topic name under ``namespace``."""
    if name.startswith("/"):
        return name
    return f"{namespace.rstrip('/')}/{name}" if namespace.strip("/") else f"/{name}"


def namespace_and_remaps(argv: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The namespace and the topic remaps (``from`` -> ``to``) in ``argv``'s
    ``--ros-args`` sections; a node-specific remap (``node:from:=to``) counts for any node."""
    namespace, remaps, in_ros_args = "/", {}, False
    it = iter(argv)
    for arg in it:
        if arg == "--ros-args":
            in_ros_args = True
        elif arg == "--":
            in_ros_args = False
        elif in_ros_args and arg in ("-r", "--remap"):
            rule = next(it, "")
            if ":=" not in rule:
                continue
            source, target = rule.split(":=", 1)
            source = source.rsplit(":", 1)[-1]
            if source == "__ns":
                namespace = target if target.startswith("/") else f"/{target}"
            elif not source.startswith("__"):
                remaps[source] = target
    return namespace, remaps


def namespace_ros_args(namespace: str) -> list[str]:
    """ROS arguments that put a node in ``namespace`` ("" or "/": none)."""
    return ["--ros-args", "-r", f"__ns:=/{namespace.strip('/')}"] if namespace.strip("/") else []


def topic_names(topics: Sequence[str], argv: Sequence[str]) -> list[str]:
    """The fully qualified names ``topics`` get with ``argv``'s ROS arguments."""
    namespace, remaps = namespace_and_remaps(argv)
    names = set()
    for topic in topics:
        full = resolve(topic, namespace)
        target = remaps.get(topic, remaps.get(full))
        names.add(resolve(target, namespace) if target else full)
    return sorted(names)


def control_topic_names(argv: Sequence[str]) -> list[str]:
    """The fully qualified names the control topics get with ``argv``'s ROS arguments."""
    return topic_names(CONTROL_TOPICS, argv)


def camera_topic_names(argv: Sequence[str]) -> list[str]:
    """The fully qualified names the camera's image topics get with ``argv``'s ROS
    arguments."""
    return topic_names(CAMERA_TOPICS, argv)


def profiles_xml(control_names: Sequence[str], camera_names: Sequence[str] = ()) -> str:
    """A profiles file whose readers of ``control_names`` listen on UDP loopback only and
    whose writers and readers of ``camera_names`` repair lost fragments without delay."""
    entries = "".join([*(_READER.format(name=name) for name in control_names),
                       *(_CAMERA.format(name=name) for name in camera_names)])
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<!-- written by diffusion_policy_ros.ros.dds_profiles; see "
            "config/fastdds_profiles.xml -->\n"
            f"<dds xmlns=\"http://www.eprosima.com\">\n  <profiles>\n{entries}  </profiles>\n"
            "</dds>\n")


def use_package_dds_profiles(argv: Sequence[str] | None = None,
                             environ: MutableMapping[str, str] = os.environ,
                             directory: Path | None = None) -> str:
    """Point Fast DDS at the profiles for ``argv``'s names (``sys.argv`` by default)
    unless ``environ`` names a file already; returns the file in use."""
    if environ.get(PROFILES_ENV):
        return environ[PROFILES_ENV]
    argv = sys.argv if argv is None else argv
    names = control_topic_names(argv), camera_topic_names(argv)
    if names == (control_topic_names([]), camera_topic_names([])):
        path = PROFILES_FILE
    else:
        text = profiles_xml(*names)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = Path(directory or tempfile.gettempdir()) / f"dpr_fastdds_profiles_{digest}.xml"
        if not path.is_file():
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, path)
    environ[PROFILES_ENV] = str(path)
    return str(path)
