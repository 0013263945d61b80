"""Policy configs: the shipped YAML files load, and bad values fail loudly."""

import dataclasses
import re

import pytest
import yaml

from diffusion_policy_ros.config import CONFIG_DIR, ConfigError
from diffusion_policy_ros.policy.configuration_diffusion import (
    DiffusionPolicyConfig,
    load_policy_config,
    policy_config_from_dict,
    policy_config_to_dict,
)


@pytest.mark.parametrize("name, denoiser", [("policy_unet", "unet"), ("policy_dit", "dit")])
def test_shipped_yaml_loads_and_lists_every_field(name, denoiser):
    path = CONFIG_DIR / f"{name}.yaml"
    config = load_policy_config(path)
    assert config.denoiser == denoiser
    assert (config.n_obs_steps, config.horizon, config.n_action_steps) == (2, 16, 8)
    assert config.action_dt_s == 0.1 and config.action_dim == 7
    assert config.num_train_timesteps == 100 and config.num_inference_steps == 10
    assert config.beta_schedule == "squaredcos_cap_v2" and config.clip_sample
    listed = set(yaml.safe_load(path.read_text()))
    relevant = {f.name for f in dataclasses.fields(DiffusionPolicyConfig)}
    other = {"unet": {"dit_width", "dit_layers", "dit_heads", "dit_mlp_ratio", "keep_layers"},
             "dit": {"unet_base_dim", "unet_levels", "unet_kernel_size"}}[denoiser]
    assert listed == relevant - other
    assert load_policy_config(name) == config


def test_dict_round_trip():
    config = DiffusionPolicyConfig(denoiser="dit", keep_layers=[0, 2, 5])
    assert policy_config_from_dict(policy_config_to_dict(config)) == config


@pytest.mark.parametrize("values, message", [
    ({"denoiser": "mlp"}, "must be one of"),
    ({"horizon_steps": 16}, "unknown parameter"),
    ({"n_action_steps": 20}, "n_action_steps 20 > horizon 16"),
    ({"keep_layers": [0, 8]}, "below dit_layers"),
    ({"keep_layers": [3, 1]}, "ascending"),
    ({"keep_layers": [1.5]}, "must be integers"),
    ({"image_crop_size": [130, 116]}, "exceeds image_size"),
    ({"horizon": 10}, "divide by 2**(unet_levels - 1)"),
    ({"joint_names": ["a", "a", "b", "c", "d", "e", "f"]}, "distinct"),
])
def test_bad_values_raise_config_error(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        policy_config_from_dict(values)


def test_keep_layers_from_yaml_are_integers():
    config = policy_config_from_dict({"denoiser": "dit", "keep_layers": [0, 3, 7]})
    assert config.keep_layers == [0, 3, 7] and all(type(i) is int for i in config.keep_layers)
    assert DiffusionPolicyConfig(dit_layers=4).kept_layers == [0, 1, 2, 3]


def test_overrides_replace_fields_typed_and_checked():
    config = load_policy_config("policy_unet", ["tool_relative_target=true", "grounding_dim=32"])
    assert config.tool_relative_target is True and config.grounding_dim == 32
    assert load_policy_config("policy_unet").tool_relative_target is False
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        load_policy_config("policy_unet", ["tool_relative_target"])
    with pytest.raises(ConfigError, match="no_such_field"):
        load_policy_config("policy_unet", ["no_such_field=1"])
    with pytest.raises(ValueError, match="needs target_grounding"):
        load_policy_config("policy_unet", ["target_grounding=false", "target_aux_weight=0",
                                           "tool_relative_target=true"]).validate()
