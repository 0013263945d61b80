"""Declare a config dataclass as ROS parameters (with descriptors) and read it back."""

from __future__ import annotations

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node

from diffusion_policy_ros.config import ConfigField, config_fields, config_from_params


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


def declare_config(node: Node, cls: type):
    """Declare every field of ``cls`` on ``node`` and return the validated config.

    Values come from the node's parameter overrides (``--params-file``,
    ``-p``), falling back to the dataclass defaults. Raises ``ConfigError``.
    """
    values = {}
    for field in config_fields(cls):
        param = node.declare_parameter(field.param_name, field.default, _descriptor(field))
        values[field.param_name] = param.value
    return config_from_params(cls, values)
