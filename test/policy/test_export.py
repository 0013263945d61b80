"""dpr export: the ONNX graphs run on ONNX Runtime and match eager torch; the backend
refuses graphs that do not belong to the checkpoint."""

import json

import numpy as np
import pytest
import torch

from diffusion_policy_ros.policy.export import MANIFEST, compare_backends, export_onnx
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation
from diffusion_policy_ros.policy.runtime_backends import BackendError

pytest.importorskip("onnxruntime")

#: Largest |ONNX Runtime - torch| accepted on a chunk (rad / m): float32 kernels differ
#: in summation order only.
TOLERANCE = 1e-4


def _policy(make_config, **changes):
    torch.manual_seed(0)
    policy = DiffusionPolicy(make_config(target_grounding=True, grounding_dim=8, **changes))
    return policy.eval()


def _histories(policy, count=4):
    rng = np.random.default_rng(0)
    frames = [synthetic_observation(policy, rng) for _ in range(count + 1)]
    return [frames[i:i + 2] for i in range(count)]


@pytest.mark.parametrize("changes", [dict(num_samples=3),
                                     dict(sampler="consistency", num_inference_steps=2,
                                          prediction_type="sample", chunk_lowpass_terms=4)],
                         ids=["ddim_medoid", "consistency_2_step_smoothed"])
def test_onnxruntime_matches_torch(make_config, language, tmp_path, changes):
    policy = _policy(make_config, **changes)
    manifest = export_onnx(policy, tmp_path, "abc")
    assert manifest["sampler"] == policy.config.sampler
    assert json.loads((tmp_path / MANIFEST).read_text())["num_samples"] == \
        policy.config.num_samples
    reference = PolicyRunner(policy, device="cpu", language=language)
    candidate = PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                             onnx_dir=tmp_path, weights_sha256="abc")
    diff = compare_backends(reference, candidate, _histories(policy), "pick up the red cube")
    assert diff["chunks"] == 4 and diff["max_abs"] < TOLERANCE, diff
    assert "frame_encoder" in candidate.last_timings_ms


def test_the_backend_refuses_graphs_of_other_weights_or_settings(make_config, language,
                                                                  tmp_path):
    policy = _policy(make_config)
    with pytest.raises(BackendError, match="export the checkpoint first"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     onnx_dir=tmp_path)
    export_onnx(policy, tmp_path, "abc")
    smoothed = _policy(make_config, chunk_lowpass_terms=4)
    with pytest.raises(BackendError, match="chunk_lowpass_terms 0, asked for 4"):
        PolicyRunner(smoothed, device="cpu", language=language, backend="onnxruntime",
                     onnx_dir=tmp_path, weights_sha256="abc")
    with pytest.raises(BackendError, match="exported from other weights"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     onnx_dir=tmp_path, weights_sha256="def")
    with pytest.raises(BackendError, match="num_inference_steps"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     onnx_dir=tmp_path, weights_sha256="abc", num_inference_steps=3)
    with pytest.raises(BackendError, match="expected one of torch, onnxruntime"):
        PolicyRunner(policy, device="cpu", language=language, backend="tensorrt")
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(BackendError, match="unreadable"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     onnx_dir=tmp_path)
