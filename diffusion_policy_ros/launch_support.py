"""Launch arguments typed and checked like the parameters they set, a user's parameter file
layered over the shipped ones (no ``launch`` import).

``ros2 launch ... name:=value`` hands every value over as a string, and launch_ros
reads a string parameter value as YAML: ``real_time_factor:=1`` reaches the node as
an integer, which a double parameter refuses. The launch files therefore convert
each argument here, with the config dataclass the parameter belongs to, and raise
one ``LaunchArgumentError`` naming the argument before any node starts.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml

from diffusion_policy_ros.config import (
    ConfigError,
    config_fields,
    config_from_params,
    field_value,
    load_node_params,
)
from diffusion_policy_ros.ros.processes import (
    RESTARTED_NODES,
    RestartCount,
    RestartPolicy,
    not_restarted,
)

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class LaunchArgumentError(ValueError):
    """A launch argument's value is unusable; the message names it and says why."""


class NodeExitError(RuntimeError):
    """A launched node exited and is not respawned: the launch ends with exit status 1 and
    this message (launch's one ``Caught exception in launch`` line)."""


def parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise LaunchArgumentError(f"{name}:={text}: expected true or false")


def typed_parameters(cls: type, values: dict[str, str]) -> dict:
    """``{parameter: typed value}`` for the non-empty ``values`` (``{argument: text}``,
    argument = parameter name of ``cls``), checked for type and range.

    An empty value is left out, so the node keeps what its parameter file says.
    """
    fields = {f.param_name: f for f in config_fields(cls)}
    out = {}
    for name, text in values.items():
        if text == "":
            continue
        field = fields[name]
        try:
            value = text if field.type is str else yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        try:
            cfg = config_from_params(cls, {name: value})
        except ConfigError as exc:
            raise LaunchArgumentError(f"{name}:={text}: {exc}") from None
        out[name] = field_value(cfg, field)
    return out


def describe_argument(cls: type, name: str, params_file: str | Path, node_name: str) -> str:
    """The parameter's description, and the value the node gets when the argument is empty."""
    field = next(f for f in config_fields(cls) if f.param_name == name)
    try:
        current = load_node_params(params_file, node_name).get(name, field.default)
    except (OSError, ConfigError):
        current = field.default
    return f"{field.description}. Empty: {Path(params_file).name} ({current})"


def params_file_description(shipped: str, every_node: bool = False) -> str:
    """The ``params_file`` launch argument's description; ``shipped`` names the parameter
    files it overrides (``config/sim.yaml``, ``config/<node>.yaml``)."""
    given_to = ", given to every node" if every_node else ""
    return ("Your parameter file (ROS 2 --params-file layout, '/**/<node>:' keys as in "
            f"config/*.yaml){given_to}: it overrides {shipped} and the arguments left at "
            "their defaults; the arguments you give override it")


def params_file_problem(path: str | Path) -> str:
    """Why ``path`` cannot be a ROS 2 parameter file (``--params-file`` layout: node name
    -> ``ros__parameters``), '' when it can. Checked before any node starts: a node
    handed a bad file dies at start-up with an rcl parser message."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except yaml.YAMLError as exc:
        return f"is not YAML ({str(exc).splitlines()[0]})"
    if not isinstance(doc, dict) or "ros__parameters" not in yaml.safe_dump(doc):
        return ("is not a ROS 2 parameter file: expected '<node>: ros__parameters: ...' "
                "entries, e.g. '/**/policy_node:' as in config/policy_node.yaml")
    return ""


def check_params_file(text: str) -> str:
    """The ``params_file`` launch argument: '' (none) or the file's absolute path."""
    if not text:
        return ""
    problem = params_file_problem(text)
    if problem:
        raise LaunchArgumentError(f"params_file:={text}: {problem}")
    return str(Path(text).resolve())


def note_given_arguments(given: set[str]):
    """An ``OpaqueFunction`` body that records the launch arguments given on the command
    line (or by an including launch file): put first in the description, it runs before
    ``DeclareLaunchArgument`` fills in the defaults."""
    def note(context):
        given.update(context.launch_configurations)
    return note


def layered_parameters(node_name: str, shipped_file: str,
                       values: dict[str, tuple[object, str | None]], given: set[str],
                       user_file: str = "", fixed: dict | None = None) -> list:
    """A launch_ros ``Node``'s ``parameters``, each layer overriding the ones before it:
    the shipped parameter file; the values of launch arguments left at their defaults
    and the launch file's own defaults; the user's ``params_file``; the values of the
    launch arguments that were ``given``; ``fixed``, what the launch file's run depends
    on. ``values``: parameter -> (value, the launch argument that sets it, or None for a
    default of the launch file's own).

    rcl does not apply parameter files simply in order: it merges the entries of one
    node-name key in order, and lets keys that appear later win. launch_ros keys a dict
    by the node's full name, after every ``/**/<node>`` entry; a user's file keyed
    ``/**/<node>`` like the shipped ones would lose to it. So with a user's file the
    defaults go into a file keyed ``/**/<node>`` (``params_file_for``), merged before
    the user's entry, and the given values stay a dict, whose key comes last."""
    defaults = {k: v for k, (v, arg) in values.items() if arg not in given}
    chosen = {k: v for k, (v, arg) in values.items() if arg in given}
    default_layer: dict[str, object] | str = defaults
    if user_file and defaults:
        default_layer = params_file_for(node_name, defaults)
    layers = [shipped_file, default_layer, user_file, {**chosen, **(fixed or {})}]
    return [layer for layer in layers if layer]


def params_file_for(node_name: str, params: dict, directory: str | Path | None = None) -> str:
    """A parameter file keyed ``/**/<node_name>``, as the shipped ones are; in a temporary
    directory unless ``directory`` (left for the node to read, as launch_ros does)."""
    with tempfile.NamedTemporaryFile("w", prefix=f"{node_name}_defaults_", suffix=".yaml",
                                     dir=directory, delete=False, encoding="utf-8") as fh:
        yaml.safe_dump({f"/**/{node_name}": {"ros__parameters": params}}, fh)
    return fh.name


class ExitWatch:
    """What follows a launched node's exit, by the rule ``dpr bringup`` follows
    (``ros.processes``): a node of ``RESTARTED_NODES`` is respawned by launch
    (``node_arguments``: a fixed ``respawn_delay``) and counted here, and the launch ends
    once it is out of restarts; any other node's exit ends the launch (``NodeExitError``:
    exit status 1). Each exit gets one line naming the node, its exit code or signal and
    the restart count; the exits of a shutdown (Ctrl-C) get none. Imports launch only
    when used."""

    def __init__(self, name: str, policy: RestartPolicy | None = None):
        self.name = name
        self.count = (RestartCount(name, policy)
                      if name in RESTARTED_NODES and policy is not None else None)
        self._started_s = time.monotonic()

    def node_arguments(self) -> dict:
        """Keyword arguments of the node's launch_ros ``Node``."""
        if self.count is None:
            return {}
        return {"respawn": True, "respawn_delay": self.count.policy.delay_s}

    def handlers(self, node) -> list:
        """The actions that register the watch on ``node`` (a launch_ros ``Node``)."""
        from launch.actions import RegisterEventHandler
        from launch.event_handlers import OnProcessExit, OnProcessStart

        return [RegisterEventHandler(OnProcessStart(target_action=node, on_start=self._started)),
                RegisterEventHandler(OnProcessExit(target_action=node, on_exit=self._exited))]

    def _started(self, event, context) -> None:
        self._started_s = time.monotonic()

    def _exited(self, event, context):
        if context.is_shutdown:
            return None
        from launch.logging import get_logger

        ran_s = time.monotonic() - self._started_s
        if self.count is None:
            raise NodeExitError(not_restarted(self.name, event.returncode, ran_s))
        delay_s, line = self.count.after_exit(event.returncode, ran_s)
        if delay_s is None:
            raise NodeExitError(line)
        get_logger("launch").warning(line)
