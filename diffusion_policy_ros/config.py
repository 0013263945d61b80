"""Config dataclasses that double as ROS parameter declarations.

Every component has one dataclass whose fields carry a description and an
allowed range (``param(...)``). The same declaration serves three readers:
the YAML files in ``config/`` (ROS ``--params-file`` layout), the ROS node
(which declares each field as a parameter with a descriptor), and offline
tools that load the YAML without ROS. A node whose config embeds another component's
(``section``) declares that component's fields as ``<section>.<field>``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any, get_type_hints

import yaml

PACKAGE = "diffusion_policy_ros"


def package_data_dir() -> Path:
    """Where ``config/`` and ``checkpoints/`` are: the source tree or the installed share.

    A checkout (editable install, PYTHONPATH, ``colcon build --symlink-install``) uses
    its own files, so code and parameters always come from the same tree. A colcon or
    pip install copies only the Python package to site-packages and the files to
    ``share/diffusion_policy_ros`` (setup.py's data_files), found through the ament
    index (``AMENT_PREFIX_PATH``) or, without one, under the interpreter's prefix.
    """
    source = Path(__file__).resolve().parent.parent
    if (source / "package.xml").is_file() and (source / "config").is_dir():
        return source
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory(PACKAGE)))
    except (ImportError, LookupError, OSError, ValueError):
        pass  # not in the ament index (no AMENT_PREFIX_PATH, or not installed there)
    candidates.append(Path(sys.prefix) / "share" / PACKAGE)
    for share in candidates:
        if (share / "config").is_dir():
            return share
    return source


DATA_DIR = package_data_dir()
CONFIG_DIR = DATA_DIR / "config"
#: The policy this repository ships (``dpr bringup``, ``dpr replay`` and ``dpr eval`` default):
#: the consistency-distilled student of ``REFERENCE_CHECKPOINT`` (docs/explanation/distillation.md).
SHIPPED_CHECKPOINT = DATA_DIR / "checkpoints" / "grasp_unet_cd32"
#: Its DDIM-trained teacher, shipped before it: the reference of ``dpr bench lightdp``.
REFERENCE_CHECKPOINT = DATA_DIR / "checkpoints" / "grasp_unet"


class ConfigError(ValueError):
    """A config value is missing, of the wrong type, or out of range."""


def param(default: Any, description: str, *, low: float | None = None,
          high: float | None = None, name: str | None = None,
          choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field with a ROS parameter description and range.

    ``name`` is the ROS parameter name when it differs from the field name
    (dotted names such as ``camera_to_base.translation``). ``low``/``high``
    bound scalars and every element of a list.
    """
    meta = {"description": description, "low": low, "high": high,
            "param_name": name, "choices": choices}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type) -> Any:
    """A dataclass field holding another component's config dataclass ``cls``: its fields
    are this config's parameters ``<field>.<name>`` (a nested mapping in YAML), with
    ``cls``'s defaults, descriptions and ranges, checked by ``cls.validate`` as well."""
    return dataclasses.field(default_factory=cls)


def _is_section(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


@dataclasses.dataclass(frozen=True)
class ConfigField:
    #: The attribute's path from the top config (``grasp_lift.lift_m`` in a section).
    attr: str
    param_name: str
    type: type
    default: Any
    description: str
    low: float | None
    high: float | None
    choices: tuple[str, ...] | None


def _param_name(f: dataclasses.Field, prefix: str) -> str:
    return prefix + (f.metadata.get("param_name") or f.name)


def config_fields(cls: type, prefix: str = "") -> list[ConfigField]:
    """Every parameter of ``cls``, those of its ``section`` fields included."""
    hints = get_type_hints(cls)
    out: list[ConfigField] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if _is_section(hint):
            out.extend(dataclasses.replace(sub, attr=f"{f.name}.{sub.attr}")
                       for sub in config_fields(hint, f"{_param_name(f, prefix)}."))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        else:
            assert f.default_factory is not dataclasses.MISSING, f"{f.name} has no default"
            default = f.default_factory()
        base = getattr(hint, "__origin__", hint)
        out.append(ConfigField(
            attr=f.name, param_name=_param_name(f, prefix), type=base,
            default=default, description=f.metadata.get("description", ""),
            low=f.metadata.get("low"), high=f.metadata.get("high"),
            choices=f.metadata.get("choices")))
    return out


def field_value(cfg: Any, field: ConfigField) -> Any:
    """``field``'s value in the config ``cfg`` (through its sections)."""
    for attr in field.attr.split("."):
        cfg = getattr(cfg, attr)
    return cfg


def _coerce(field: ConfigField, value: Any) -> Any:
    where = f"parameter '{field.param_name}'"
    if field.type is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be a bool, got {value!r}")
        return value
    if field.type is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        if field.choices and value not in field.choices:
            raise ConfigError(f"{where} must be one of {list(field.choices)}, got {value!r}")
        return value
    if field.type is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        if field.default and isinstance(field.default[0], str):
            if not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where} must be a list of strings, got {value!r}")
            if len(value) != len(field.default):
                raise ConfigError(f"{where} must have {len(field.default)} elements, "
                                  f"got {len(value)}")
            return list(value)
        elem_type = type(field.default[0]) if field.default else float
        items = [_check_number(where, elem_type, v, field) for v in value]
        if field.default and len(items) != len(field.default):
            raise ConfigError(f"{where} must have {len(field.default)} elements, got {len(items)}")
        return items
    return _check_number(where, field.type, value, field)


def _check_number(where: str, kind: type, value: Any, field: ConfigField) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if kind is int:
        if float(value) != int(value):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, got {value!r}")
    if field.low is not None and value < field.low:
        raise ConfigError(f"{where} = {value} is below its minimum {field.low}")
    if field.high is not None and value > field.high:
        raise ConfigError(f"{where} = {value} is above its maximum {field.high}")
    return value


def config_from_params(cls: type, params: dict[str, Any]) -> Any:
    """Build ``cls`` from a flat ``{param_name: value}`` dict, checking types and ranges.

    Missing names take the dataclass default; unknown names are an error so a
    typo in a YAML file never goes unnoticed.
    """
    fields = {f.param_name: f for f in config_fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ConfigError(f"unknown parameter(s) for {cls.__name__}: {unknown}")
    values = {name: _coerce(field, params.get(name, field.default))
              for name, field in fields.items()}
    return _build(cls, "", values)


def _build(cls: type, prefix: str, values: dict[str, Any]) -> Any:
    """``cls`` from checked ``{param_name: value}``, its sections first, each validated."""
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        name = _param_name(f, prefix)
        kwargs[f.name] = (_build(hints[f.name], f"{name}.", values)
                          if _is_section(hints[f.name]) else values[name])
    cfg = cls(**kwargs)
    check = getattr(cfg, "validate", None)
    if check is not None:
        try:
            check()
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"{cls.__name__}: {exc}") from None
    return cfg


def _flatten(prefix: str, tree: dict[str, Any]) -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(f"{name}.", value))
        else:
            flat[name] = value
    return flat


def read_field_mapping(path: str | Path, cls: type) -> dict[str, Any]:
    """A plain YAML mapping of ``cls``'s fields (an offline tool's settings file, not a
    ROS parameter file); an empty file is an empty mapping."""
    with open(path, encoding="utf-8") as fh:
        values = yaml.safe_load(fh) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of {cls.__name__} fields")
    return values


def load_field_mapping(cls: type, path: str | Path, overrides: dict | None = None) -> Any:
    """``cls`` from a plain YAML mapping of its fields (an offline tool's settings file),
    with ``overrides`` on top; a None override is an option the user did not give."""
    values = read_field_mapping(path, cls)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return config_from_params(cls, values)


def load_node_params(path: str | Path, node_name: str) -> dict[str, Any]:
    """The flat ``ros__parameters`` of ``node_name`` in a ROS params file.

    The section may be keyed ``/**/node_name`` (what config/ uses: it matches the
    node in any namespace), ``node_name``, ``/node_name`` or ``/**``.
    """
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    for key in (f"/**/{node_name}", node_name, f"/{node_name}", "/**"):
        section = doc.get(key)
        if isinstance(section, dict) and "ros__parameters" in section:
            return _flatten("", section["ros__parameters"] or {})
    raise ConfigError(f"{path}: no '{node_name}: ros__parameters:' section")


def load_config(cls: type, path: str | Path, node_name: str) -> Any:
    """Load ``cls`` from the ROS params file ``path`` (section ``node_name``)."""
    return config_from_params(cls, load_node_params(path, node_name))
