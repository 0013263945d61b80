"""Declare a config dataclass as ROS parameters (with descriptors) and read it back."""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node

from diffusion_policy_ros.config import (
    ConfigError,
    ConfigField,
    config_fields,
    config_from_params,
)


def _descriptor(field: ConfigField) -> ParameterDescriptor:
    desc = ParameterDescriptor(description=field.description, read_only=True)
    elem = field.type
    if field.type is list and field.default:
        elem = type(field.default[0])
    if field.choices:
        desc.additional_constraints = f"one of {list(field.choices)}"
    if field.low is not None and field.high is not None and field.type is not list:
        if elem is int:
            desc.integer_range = [IntegerRange(from_value=int(field.low), to_value=int(field.high),
                                               step=0)]
        elif elem is float:
            desc.floating_point_range = [FloatingPointRange(from_value=float(field.low),
                                                            to_value=float(field.high), step=0.0)]
    elif field.low is not None and field.high is not None:
        desc.additional_constraints = f"each element in [{field.low}, {field.high}]"
    return desc


def _is_float_field(field: ConfigField) -> bool:
    if field.type is float:
        return True
    return field.type is list and bool(field.default) and isinstance(field.default[0], float)


def _as_float(value: Any) -> Any:
    """An integer (or a list of them) as float; anything else unchanged."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return value


def _declare_float(node: Node, field: ConfigField) -> Any:
    """Declare a double (array) parameter whose override may be written as an integer.

    ``real_time_factor:=1`` or a YAML ``1`` arrives as an integer, which a statically
    typed double parameter refuses (``InvalidParameterTypeException``). The override is
    read through a dynamically typed declaration first, then the parameter is declared
    again as a double with the value converted, so ``ros2 param describe`` still shows
    its type and range. A value of another type stays as given for ``config_from_params``
    to reject with the parameter's name.
    """
    name = field.param_name
    probe = node.declare_parameter(name, field.default, ParameterDescriptor(dynamic_typing=True))
    value = _as_float(probe.value)
    node.undeclare_parameter(name)
    ok = isinstance(value, float) or (isinstance(value, list) and value
                                      and all(isinstance(v, float) for v in value))
    if not ok:
        raise ConfigError(f"parameter '{name}' must be a number"
                          f"{' list' if field.type is list else ''}, got {value!r}")
    return node.declare_parameter(name, value, _descriptor(field), ignore_override=True).value


def declare_config(node: Node, cls: type):
    """Declare every field of ``cls`` on ``node`` and return the validated config.

    Values come from the node's parameter overrides (``--params-file``,
    ``-p``), falling back to the dataclass defaults; integers are accepted for
    float parameters. Raises ``ConfigError`` (or rclpy's
    ``InvalidParameterValueException`` for a value outside a declared range).
    """
    values = {}
    for field in config_fields(cls):
        if _is_float_field(field):
            values[field.param_name] = _declare_float(node, field)
        else:
            param = node.declare_parameter(field.param_name, field.default, _descriptor(field))
            values[field.param_name] = param.value
    return config_from_params(cls, values)
