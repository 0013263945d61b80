"""PolicyRunner: numpy in / out, devices, precision, warm-up and stage timings."""

import importlib.util

import numpy as np
import pytest
import torch

from diffusion_policy_ros.policy.checkpoint import save_checkpoint
from diffusion_policy_ros.policy.devices import (
    DeviceUnavailableError,
    autocast_context,
    resolve_device,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation

STAGES = {"language", "image_encoder", "rgb_encoder", "cloud_encoder", "point_encoder",
          "proprio_encoder", "fusion", "denoiser_step", "sampler", "total"}
ENCODERS = {"image_encoder", "rgb_encoder", "cloud_encoder", "point_encoder"}


@pytest.fixture
def runner(make_config, language):
    torch.manual_seed(0)
    return PolicyRunner(DiffusionPolicy(make_config()), device="cpu", language=language)


@pytest.fixture
def history(runner):
    rng = np.random.default_rng(0)
    return [synthetic_observation(runner.policy, rng) for _ in range(2)]


def test_predict_returns_a_numpy_chunk_with_stage_timings(runner, history):
    runner.warmup("pick up the red cube", iterations=1)
    chunk = runner.predict(history, "pick up the red cube", noise=3)
    timings = runner.last_timings_ms
    assert chunk.shape == (16, 7) and chunk.dtype == np.float64 and np.isfinite(chunk).all()
    assert np.array_equal(chunk, runner.predict(history, "pick up the red cube", noise=3))
    assert set(timings) == STAGES
    # The second call found both frames in the cache: no encoder ran.
    assert set(runner.last_timings_ms) == STAGES - ENCODERS
    assert len(runner.timer.durations_s["denoiser_step"]) == 10
    assert timings["total"] >= timings["denoiser_step"] > 0


def test_a_noise_stream_gives_every_chunk_new_noise_and_repeats_for_its_seed(runner, history):
    """Same observation, successive chunks: never the same chunk twice (no sampling fixed
    point), and the same sequence again from a stream with the same seed."""
    def chunks(stream):
        return [runner.predict(history, "pick up the red cube", noise=stream) for _ in range(3)]

    first = chunks(runner.noise_stream(7))
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    assert all(np.array_equal(a, b) for a, b in zip(first, chunks(runner.noise_stream(7)),
                                                    strict=True))
    assert np.array_equal(first[0], runner.predict(history, "pick up the red cube", noise=7))


def test_instruction_changes_the_chunk(runner, history):
    red = runner.predict(history, "pick up the red cube", noise=0)
    blue = runner.predict(history, "pick up the blue cube", noise=0)
    assert not np.array_equal(red, blue)


def test_bad_observations_are_named(runner, history):
    with pytest.raises(ValueError, match="expected 2 observations"):
        runner.predict(history[:1], "pick up the red cube")
    broken = [dict(history[0]), history[1]]
    broken[0]["image"] = broken[0]["image"][:, :16]
    with pytest.raises(ValueError, match="observation 0 'image' has shape"):
        runner.predict(broken, "pick up the red cube")
    broken[0] = {k: v for k, v in history[0].items() if k != "points"}
    with pytest.raises(ValueError, match="observation 0 lacks 'points'"):
        runner.predict(broken, "pick up the red cube")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_runs_on_cpu(make_config, language, history, precision):
    torch.manual_seed(0)
    policy = DiffusionPolicy(make_config())
    reduced = PolicyRunner(policy, device="cpu", precision=precision, language=language)
    chunk = reduced.predict(history, "pick up the red cube", noise=0)
    assert np.isfinite(chunk).all()
    full = PolicyRunner(policy, device="cpu", language=language)
    assert np.abs(chunk - full.predict(history, "pick up the red cube", noise=0)).max() < 0.5


def test_from_checkpoint(tmp_path, runner, history, language):
    path = save_checkpoint(runner.policy, tmp_path / "ckpt", dataset_id="test")
    loaded = PolicyRunner.from_checkpoint(path, joint_names=runner.config.joint_names,
                                          device="cpu", language=language)
    assert np.array_equal(loaded.predict(history, "pick up the red cube", noise=1),
                          runner.predict(history, "pick up the red cube", noise=1))


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                    reason="torch_npu is installed")
def test_npu_without_torch_npu_is_a_clear_error():
    with pytest.raises(DeviceUnavailableError, match="needs the Ascend adapter torch_npu"):
        resolve_device("npu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(DeviceUnavailableError, match="torch.cuda.is_available"):
        resolve_device("cuda")


def test_auto_and_unknown_devices():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if expected == "cpu" and importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu installed: auto may pick npu")
    assert resolve_device("auto").type == expected
    with pytest.raises(DeviceUnavailableError, match="must be one of"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast_context(torch.device("cpu"), "int8")


def test_each_frame_is_encoded_once_while_it_is_in_the_history(runner, language):
    """A sliding To = 2 window: every frame after the first two is new once, reused once;
    the chunks equal those of a runner that encodes every frame afresh."""
    rng = np.random.default_rng(1)
    frames = [synthetic_observation(runner.policy, rng) for _ in range(6)]
    fresh = PolicyRunner(runner.policy, device="cpu", language=language)
    for i in range(5):
        window = frames[i:i + 2]
        fresh.frame_cache.clear()
        assert np.allclose(runner.predict(window, "pick up the red cube", noise=i),
                           fresh.predict(window, "pick up the red cube", noise=i), atol=1e-6)
    for half in (runner.frame_cache.images, runner.frame_cache.clouds):
        assert (half.misses, half.hits) == (6, 4)
    # Another instruction is another grounding: the clouds are encoded again, the
    # images (which do not see it) are not.
    runner.predict(frames[4:6], "pick up the blue cube", noise=0)
    assert runner.frame_cache.clouds.misses == 8 and runner.frame_cache.images.misses == 6


def test_an_image_encoded_ahead_is_not_encoded_again(runner, language):
    """policy_node encodes a frame's image while its cloud is on the way: the chunk then
    runs the cloud encoder only, and equals the chunk computed in one go."""
    rng = np.random.default_rng(2)
    window = [synthetic_observation(runner.policy, rng) for _ in range(2)]
    fresh = PolicyRunner(runner.policy, device="cpu", language=language)
    expected = fresh.predict(window, "pick up the red cube", noise=5)
    runner.frame_cache.clear()
    for obs in window:
        assert runner.encode_image_ahead(obs["image"])
    assert not runner.encode_image_ahead(window[-1]["image"])
    misses = runner.frame_cache.images.misses
    chunk = runner.predict(window, "pick up the red cube", noise=5)
    assert np.allclose(chunk, expected, atol=1e-6)
    assert runner.frame_cache.images.misses == misses
    assert "image_encoder" not in runner.last_timings_ms
    assert "cloud_encoder" in runner.last_timings_ms
