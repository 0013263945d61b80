"""Checkpoints: exact round trip; missing, corrupt and mismatched ones fail with CheckpointError."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

import diffusion_policy_ros
from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.checkpoint import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    load_checkpoint,
    read_metadata,
    save_checkpoint,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

POLICY_DIR = Path(diffusion_policy_ros.__file__).parent / "policy"


@pytest.fixture
def saved(tmp_path, make_config, make_batch):
    torch.manual_seed(0)
    config = make_config(denoiser="dit", keep_layers=[0, 2])
    policy = DiffusionPolicy(config).eval()
    policy.normalizer.set_stats({
        keys.ACTION: {"min": -torch.arange(1.0, 8.0), "max": torch.arange(1.0, 8.0)},
        keys.STATE: {"min": -torch.ones(7), "max": 2 * torch.ones(7)},
        keys.POINTS_XYZ: {"min": torch.zeros(3), "max": torch.ones(3)}})
    path = save_checkpoint(policy, tmp_path / "ckpt", dataset_id="sim-grasp-v1",
                           dataset_hash="abc123", extra={"epochs": 3})
    return policy, path, make_batch(config, 2, with_action=False)


def test_round_trip_gives_identical_chunks_and_metadata(saved):
    policy, path, obs = saved
    loaded, metadata = load_checkpoint(path, joint_names=policy.config.joint_names,
                                       action_dim=7)
    assert loaded.config == policy.config and not loaded.training
    a = policy.predict_action_chunk(obs, generator=torch.Generator().manual_seed(5))
    b = loaded.predict_action_chunk(obs, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert torch.equal(loaded.normalizer.stats()[keys.ACTION]["max"], torch.arange(1.0, 8.0))
    assert metadata == read_metadata(path)
    assert metadata["dataset"] == {"id": "sim-grasp-v1", "hash": "abc123"}
    assert metadata["code_version"] == diffusion_policy_ros.__version__
    assert "git_commit" in metadata and metadata["extra"] == {"epochs": 3}
    assert metadata["robot"] == {"joint_names": policy.config.joint_names, "action_dim": 7,
                                 "action_dt_s": 0.1, "horizon": 16, "n_obs_steps": 2,
                                 "n_action_steps": 8}
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "metadata.json",
                                                      "model.safetensors"]


def test_truncated_weights_are_corrupt(saved):
    _, path, _ = saved
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointCorruptError, match="model.safetensors.*sha256"):
        load_checkpoint(path)


def test_flipped_byte_is_corrupt(saved):
    _, path, _ = saved
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="sha256"):
        load_checkpoint(path)


def test_unparsable_safetensors_is_corrupt_even_with_matching_hash(saved):
    _, path, _ = saved
    weights = path / "model.safetensors"
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    meta = json.loads((path / "metadata.json").read_text())
    meta["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointCorruptError, match="not a readable safetensors"):
        load_checkpoint(path)


def test_garbled_json_is_corrupt(saved):
    _, path, _ = saved
    (path / "config.json").write_text('{"horizon": 16,')
    with pytest.raises(CheckpointCorruptError, match="config.json is not valid JSON"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "metadata.json"])
def test_missing_file(saved, name):
    _, path, _ = saved
    (path / name).unlink()
    with pytest.raises(CheckpointNotFoundError, match=name):
        load_checkpoint(path)


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    assert issubclass(CheckpointNotFoundError, FileNotFoundError)


def test_other_joint_names_mismatch(saved):
    _, path, _ = saved
    names = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3", "finger"]
    with pytest.raises(CheckpointMismatchError, match="trained for joints"):
        load_checkpoint(path, joint_names=names)
    with pytest.raises(CheckpointMismatchError, match="order must match"):
        load_checkpoint(path, joint_names=["joint_2", "joint_1", "joint_3", "joint_4",
                                           "joint_5", "joint_6", "gripper_joint"])


def test_other_action_dim_mismatch(saved):
    _, path, _ = saved
    with pytest.raises(CheckpointMismatchError, match="predicts 7 action values.*needs 6"):
        load_checkpoint(path, action_dim=6)


def test_checkpoint_for_a_six_value_robot_is_a_mismatch_not_a_crash(saved):
    _, path, _ = saved
    meta = json.loads((path / "metadata.json").read_text())
    meta["robot"]["joint_names"] = meta["robot"]["joint_names"][:6]
    meta["robot"]["action_dim"] = 6
    (path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointMismatchError):
        load_checkpoint(path, joint_names=[f"joint_{i}" for i in range(1, 7)] + ["gripper_joint"])
    with pytest.raises(CheckpointCorruptError, match="different robot interfaces"):
        load_checkpoint(path)


def test_weights_of_another_architecture_do_not_load(saved, make_config):
    _, path, _ = saved
    config = json.loads((path / "config.json").read_text())
    config["keep_layers"] = [0, 1, 2]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointCorruptError, match="does not fit the model"):
        load_checkpoint(path)


def test_all_errors_share_one_base_class():
    for cls in (CheckpointNotFoundError, CheckpointCorruptError, CheckpointMismatchError):
        assert issubclass(cls, CheckpointError)


def test_policy_code_never_unpickles():
    for source in POLICY_DIR.glob("*.py"):
        text = source.read_text()
        for call in ("torch.load(", "import pickle", "pickle.load"):
            assert call not in text, (source.name, call)
