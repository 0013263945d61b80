"""Launch arguments typed and checked like the parameters they set (no ``launch`` import).

``ros2 launch ... name:=value`` hands every value over as a string, and launch_ros
reads a string parameter value as YAML: ``real_time_factor:=1`` reaches the node as
an integer, which a double parameter refuses. The launch files therefore convert
each argument here, with the config dataclass the parameter belongs to, and raise
one ``LaunchArgumentError`` naming the argument before any node starts.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from diffusion_policy_ros.config import (
    ConfigError,
    config_fields,
    config_from_params,
    field_value,
    load_node_params,
)

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class LaunchArgumentError(ValueError):
    """A launch argument's value is unusable; the message names it and says why."""


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
