"""dpr export: the ONNX graphs run on ONNX Runtime and match eager torch; the backend
refuses graphs that do not belong to the checkpoint."""

import json
import shutil

import numpy as np
import pytest
import torch

from diffusion_policy_ros.policy.export import (
    AOT_CHUNK_PACKAGE,
    AOT_INDUCTOR_CONFIGS,
    AOT_MANIFEST,
    AOT_MANIFEST_FORMAT,
    AOT_PACKAGES,
    MANIFEST,
    aot_options_changed,
    compare_backends,
    compile_aot_package,
    cpu_instruction_sets,
    export_aot,
    export_onnx,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation
from diffusion_policy_ros.policy.runtime_backends import BackendError

from .conftest import tiny_config

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


@pytest.mark.parametrize("changes", [pytest.param(dict(num_samples=3), marks=pytest.mark.slow),
                                     dict(sampler="consistency", num_inference_steps=2,
                                          prediction_type="sample", chunk_lowpass_terms=4),
                                     dict(denoiser="dit", dit_layers=4, keep_layers=[0, 2],
                                          sampler="consistency", num_inference_steps=1,
                                          prediction_type="sample", num_samples=2)],
                         ids=["ddim_medoid", "consistency_2_step_smoothed",
                              "pruned_dit_consistency_1_step"])
def test_onnxruntime_matches_torch(make_config, language, tmp_path, changes):
    policy = _policy(make_config, **changes)
    manifest = export_onnx(policy, tmp_path, "abc")
    assert manifest["sampler"] == policy.config.sampler
    assert json.loads((tmp_path / MANIFEST).read_text())["num_samples"] == \
        policy.config.num_samples
    reference = PolicyRunner(policy, device="cpu", language=language)
    candidate = PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                             graph_dir=tmp_path, weights_sha256="abc")
    diff = compare_backends(reference, candidate, _histories(policy), "pick up the red cube")
    assert diff["chunks"] == 4 and diff["max_abs"] < TOLERANCE, diff
    assert {"image_encoder", "cloud_encoder"} <= set(candidate.last_timings_ms)
    _check_image_encoded_ahead(reference, candidate, policy)


def _check_image_encoded_ahead(reference, candidate, policy):
    """An image the candidate encoded before its chunk gives that chunk unchanged, and
    the chunk runs the cloud encoder only."""
    history = _histories(policy, 6)[-1]
    assert candidate.encode_image_ahead(history[-1]["image"])
    assert not candidate.encode_image_ahead(history[-1]["image"])  # cached already
    expected = reference.predict(history, "pick up the red cube", noise=3)
    misses = candidate.frame_cache.images.misses
    chunk = candidate.predict(history, "pick up the red cube", noise=3)
    assert np.abs(chunk - expected).max() < TOLERANCE
    assert candidate.frame_cache.images.misses == misses + 1  # the older frame only


def test_the_backend_refuses_graphs_of_other_weights_or_settings(make_config, language,
                                                                  tmp_path):
    policy = _policy(make_config)
    with pytest.raises(BackendError, match="export the checkpoint first"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     graph_dir=tmp_path)
    (tmp_path / "frame_encoder.onnx").write_bytes(b"an earlier layout's graph")
    export_onnx(policy, tmp_path, "abc")
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == [
        "chunk.onnx", "cloud_encoder.onnx", "image_encoder.onnx"]
    smoothed = _policy(make_config, chunk_lowpass_terms=4)
    with pytest.raises(BackendError, match="chunk_lowpass_terms 0, asked for 4"):
        PolicyRunner(smoothed, device="cpu", language=language, backend="onnxruntime",
                     graph_dir=tmp_path, weights_sha256="abc")
    with pytest.raises(BackendError, match="exported from other weights"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     graph_dir=tmp_path, weights_sha256="def")
    with pytest.raises(BackendError, match="num_inference_steps"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     graph_dir=tmp_path, weights_sha256="abc", num_inference_steps=3)
    with pytest.raises(BackendError, match="expected one of torch, onnxruntime"):
        PolicyRunner(policy, device="cpu", language=language, backend="tensorrt")
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(BackendError, match="unreadable"):
        PolicyRunner(policy, device="cpu", language=language, backend="onnxruntime",
                     graph_dir=tmp_path)


@pytest.fixture(scope="module")
def aot_export(tiny_aot_student):
    """(policy, graph dir, manifest, weights sha256) of the compiled student the tests share."""
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint

    checkpoint, out, manifest = tiny_aot_student
    policy, meta = load_checkpoint(checkpoint)
    return policy, out, manifest, meta["weights_sha256"]


def test_aotinductor_matches_torch(aot_export, language):
    policy, out, manifest, sha = aot_export
    assert manifest["format"] == AOT_MANIFEST_FORMAT and manifest["num_samples"] == 3
    assert set(manifest["packages_sha256"]) == set(AOT_PACKAGES)
    # The Inductor options are recorded (the fixture's are only frozen): dpr export
    # --if-stale compiles again when they are not today's.
    assert manifest["inductor_configs"] == {n: {"freezing": True} for n in AOT_PACKAGES}
    assert "this export uses" in aot_options_changed(manifest)
    assert aot_options_changed({**manifest, "inductor_configs": AOT_INDUCTOR_CONFIGS}) == ""
    reference = PolicyRunner(policy, device="cpu", language=language)
    candidate = PolicyRunner(policy, device="cpu", language=language, backend="aotinductor",
                             graph_dir=out, weights_sha256=sha, num_threads=1)
    histories = _histories(policy)
    diff = compare_backends(reference, candidate, histories, "pick up the red cube")
    assert diff["chunks"] == 4 and diff["max_abs"] < TOLERANCE, diff
    assert {"image_encoder", "cloud_encoder"} <= set(candidate.last_timings_ms)
    _check_image_encoded_ahead(reference, candidate, policy)
    # Arrays in another memory order (the camera path hands over Fortran-ordered colours):
    # the package must see the same values, not the same bytes.
    fortran = [[{k: np.asfortranarray(v) for k, v in obs.items()} for obs in history]
               for history in histories]
    diff = compare_backends(reference, candidate, fortran, "pick up the red cube", seed=7)
    assert diff["max_abs"] < TOLERANCE, diff


def test_aotinductor_refuses_other_weights_builds_or_damaged_packages(aot_export, language,
                                                                      tmp_path):
    policy, out, _, sha = aot_export

    def runner(graph_dir=out, **kwargs):
        return PolicyRunner(policy, device="cpu", language=language, backend="aotinductor",
                            graph_dir=graph_dir,
                            **{"weights_sha256": sha, "num_threads": 1, **kwargs})

    with pytest.raises(BackendError, match="compiled for 1 intra-op thread.*runs 2.*"
                       "--threads 2"):
        runner(num_threads=2)
    with pytest.raises(BackendError, match="exported from other weights"):
        runner(weights_sha256="def")
    with pytest.raises(BackendError, match="num_samples 3, asked for 8"):
        runner(num_samples=8)
    with pytest.raises(BackendError, match="runs on the CPU in fp32"):
        runner(precision="bf16")
    copy = tmp_path / "aot"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / AOT_MANIFEST).read_text())
    (copy / AOT_MANIFEST).write_text(json.dumps({**manifest, "torch": "0.0.1"}))
    with pytest.raises(BackendError, match="compiled for torch '0.0.1'"):
        runner(copy)
    here = cpu_instruction_sets()
    cases = [(sorted({*here, "avx9000"}), "may use avx9000, which this CPU lacks"),
             (None, "a CPU its manifest does not name")]
    if here:
        cases.append((here[1:], f"without {here[0]} that this CPU has"))
    for isa, match in cases:
        (copy / AOT_MANIFEST).write_text(json.dumps({**manifest,
                                                     "cpu_instruction_sets": isa}))
        with pytest.raises(BackendError, match=match):
            runner(copy)
    (copy / AOT_MANIFEST).write_text(json.dumps(manifest))
    with open(copy / AOT_CHUNK_PACKAGE, "r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(BackendError, match="does not match its manifest's sha256"):
        runner(copy)
    (copy / AOT_MANIFEST).unlink()
    with pytest.raises(BackendError, match="export the checkpoint first"):
        runner(copy)


def test_the_chunk_heads_autotuned_gemms_compute_what_torch_does(tmp_path):
    """The shipped chunk package's options (GEMMs autotuned against Inductor's C++
    micro-kernels) on a head-sized layer: K x horizon rows, as in the U-Net."""
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.Linear(80, 32), torch.nn.Mish()).eval()
    x = torch.randn(3, 16, 80)
    path = tmp_path / "head.pt2"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            compile_aot_package(torch.export.export(head, (x,)), path,
                                AOT_INDUCTOR_CONFIGS[AOT_CHUNK_PACKAGE])
            package = torch._inductor.aoti_load_package(str(path))
            assert AOT_INDUCTOR_CONFIGS[AOT_CHUNK_PACKAGE]["max_autotune"]
            assert torch.allclose(package(x), head(x), atol=1e-5)
    finally:
        torch.set_num_threads(threads)


def test_aot_packages_are_looked_up_per_thread_count(tiny_aot_student, language):
    checkpoint, out, manifest = tiny_aot_student
    assert out == checkpoint / "aot" / "threads_1" and manifest["threads_at_export"] == 1
    runner = PolicyRunner.from_checkpoint(checkpoint, device="cpu", language=language,
                                          backend="aotinductor", num_threads=1)
    assert runner.backend.manifest["packages_sha256"] == manifest["packages_sha256"]
    with pytest.raises(BackendError, match="threads_2/aot.json not found.*--threads 2"):
        PolicyRunner.from_checkpoint(checkpoint, device="cpu", language=language,
                                     backend="aotinductor", num_threads=2)


@pytest.mark.slow
def test_dpr_export_if_stale_exports_once_per_checkpoint(tmp_path, capsys):
    from diffusion_policy_ros.cli import main
    from diffusion_policy_ros.policy.checkpoint import save_checkpoint

    ckpt = save_checkpoint(_policy(tiny_config), tmp_path / "ckpt", dataset_id="test")
    argv = ["export", "--checkpoint", str(ckpt), "--if-stale"]
    assert main(argv) == 0
    assert "exporting:" in capsys.readouterr().out and (ckpt / "onnx" / MANIFEST).exists()
    assert main(argv) == 0
    assert "is up to date" in capsys.readouterr().out
    assert main([*argv, "--samples", "2"]) == 0  # another K: exported again
    assert "num_samples 1, asked for 2" in capsys.readouterr().out


def test_aotinductor_export_names_what_it_compiles(make_config, tmp_path):
    from diffusion_policy_ros.errors import InputError

    with pytest.raises(InputError, match="compiles consistency students.*use --format onnx"):
        export_aot(_policy(make_config), tmp_path, "abc")  # a DDIM policy


def test_cpu_instruction_sets_reads_the_extensions_of_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma hypervisor avx512f "
                       "constant_tsc amx_tile\n\nprocessor\t: 1\nflags\t\t: fpu sse2\n")
    assert cpu_instruction_sets(cpuinfo) == ["amx_tile", "avx2", "avx512f", "fma", "sse2"]
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve bf16\n")
    assert cpu_instruction_sets(arm) == ["aes", "asimd", "bf16", "sve"]
    assert cpu_instruction_sets(tmp_path / "absent") == []
