"""Runtime backends of ``PolicyRunner``: the parts of a chunk on eager torch, on
ONNX Runtime or as AOTInductor packages (``policy/export.py`` writes the graphs).

- ``encode_image``: one camera frame's image -> its tokens
  (``DiffusionPolicy.encode_images``), and ``encode_cloud``: the frame's cloud +
  instruction -> its tokens and grounded target (``encode_clouds``); the runner caches
  both per frame, and can run the first before the frame's cloud has arrived.
- ``chunk``: To frames' features + instruction + joint states + initial noise ->
  (1, T, D) joint targets (fusion, the fixed-step sampler, the medoid of K,
  un-normalisation: ``DiffusionPolicy.condition_from_frames`` +
  ``chunk_from_condition``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.timing import StageTimer, timed

BACKENDS = ("torch", "onnxruntime", "aotinductor")


class TorchBackend:
    """Eager PyTorch on the policy's device."""

    name = "torch"

    def __init__(self, policy: DiffusionPolicy):
        self.policy = policy

    def encode_image(self, image: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "image_encoder"):
            return self.policy.encode_images(image, timer)

    def encode_cloud(self, points: torch.Tensor, colors: torch.Tensor, language: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "cloud_encoder"):
            return self.policy.encode_clouds(points, colors, language, timer)

    def chunk(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
              state: torch.Tensor, noises: torch.Tensor, steps: int, num_samples: int,
              timer: StageTimer | None = None) -> torch.Tensor:
        cond, _ = self.policy.condition_from_frames(frames, language, state, timer)
        with timed(timer, "sampler"):
            return self.policy.chunk_from_condition(cond, state, noises, steps, num_samples,
                                                    timer)


class BackendError(ValueError):
    """A backend cannot run this checkpoint; the message says why and what to do."""


def read_manifest(path: Path, expected_format: str, weights_sha256: str | None, steps: int,
                  num_samples: int, chunk_lowpass_terms: int, export_command: str) -> dict:
    """An export's manifest, checked against the checkpoint and the runner's settings
    (everything a static graph has fixed); ``BackendError`` says what does not match."""
    if not path.exists():
        raise BackendError(f"{path} not found: export the checkpoint first "
                           f"({export_command})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackendError(f"{path} is unreadable ({exc}): export again") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != expected_format:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackendError(f"{path}: format {found!r}, expected {expected_format!r}: "
                           f"export again")
    if weights_sha256 and manifest.get("weights_sha256") != weights_sha256:
        raise BackendError(f"{path.parent} was exported from other weights (sha256 "
                           f"{str(manifest.get('weights_sha256'))[:12]}..., the checkpoint "
                           f"has {weights_sha256[:12]}...): export this checkpoint again")
    for name, wanted in (("num_inference_steps", steps), ("num_samples", num_samples),
                         ("chunk_lowpass_terms", chunk_lowpass_terms)):
        if manifest.get(name, 0) != wanted:
            raise BackendError(f"{path.parent} was exported with {name} "
                               f"{manifest.get(name)}, asked for {wanted}: export with "
                               f"dpr export --steps/--samples or use those values")
    return manifest


class _ExportedGraphs:
    """What the static-graph backends share: the manifest they were checked against, its
    cloud-feature order, and the step count and K fixed in the graphs."""

    graphs = "graphs"
    """How messages name this backend's exported files."""

    def _accept(self, manifest: dict, steps: int, num_samples: int) -> None:
        from diffusion_policy_ros.policy.export import IMAGE_FEATURE_KEYS

        self.manifest = manifest
        self.feature_keys = list(manifest["frame_features"])
        self.cloud_keys = [k for k in self.feature_keys if k not in IMAGE_FEATURE_KEYS]
        self.steps, self.num_samples = steps, num_samples

    def _check_settings(self, steps: int, num_samples: int) -> None:
        if (steps, num_samples) != (self.steps, self.num_samples):
            raise BackendError(f"the {self.graphs} run {self.steps} steps x K "
                               f"{self.num_samples}, asked for {steps} x {num_samples}")


class OnnxRuntimeBackend(_ExportedGraphs):
    """The graphs ``dpr export`` wrote, on ONNX Runtime's CPU execution provider.

    Refuses (``BackendError``) a missing onnxruntime, missing graphs, graphs exported
    from other weights (the manifest's sha256 against the checkpoint's), or a step
    count / K / chunk low-pass other than the graphs were exported with (all are fixed
    in them).
    """

    name = "onnxruntime"
    graphs = "ONNX graphs"

    def __init__(self, graph_dir: str | Path, weights_sha256: str | None, steps: int,
                 num_samples: int, num_threads: int | None = None,
                 chunk_lowpass_terms: int = 0):
        try:
            import onnxruntime
        except ImportError as exc:
            raise BackendError("backend 'onnxruntime' needs the onnxruntime package "
                               "(pip install onnxruntime)") from exc
        from diffusion_policy_ros.policy.export import GRAPHS, MANIFEST, MANIFEST_FORMAT

        graph_dir = Path(graph_dir)
        manifest = read_manifest(graph_dir / MANIFEST, MANIFEST_FORMAT, weights_sha256, steps,
                                 num_samples, chunk_lowpass_terms, "dpr export --checkpoint CKPT")
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = num_threads or torch.get_num_threads()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        try:
            self.image_session, self.cloud_session, self.chunk_session = (
                onnxruntime.InferenceSession(str(graph_dir / name), options, providers=providers)
                for name in GRAPHS)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise BackendError(f"ONNX Runtime cannot load {graph_dir} "
                               f"({type(exc).__name__}: {exc})") from exc
        # The exporter drops inputs a graph does not use (the instruction, for a cloud
        # encoder without grounding): feed only what each session declares.
        self.cloud_inputs = {i.name for i in self.cloud_session.get_inputs()}
        self.chunk_inputs = {i.name for i in self.chunk_session.get_inputs()}
        self._accept(manifest, steps, num_samples)

    def encode_image(self, image: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "image_encoder"):
            (tokens,) = self.image_session.run(None, {"image": image.cpu().numpy()})
        return {"image_tokens": torch.from_numpy(tokens)}

    def encode_cloud(self, points: torch.Tensor, colors: torch.Tensor, language: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "cloud_encoder"):
            feeds = {"points": points.float().cpu().numpy(), "colors": colors.cpu().numpy(),
                     "language": language.float().cpu().numpy()}
            outputs = self.cloud_session.run(
                None, {k: v for k, v in feeds.items() if k in self.cloud_inputs})
        return {k: torch.from_numpy(v) for k, v in zip(self.cloud_keys, outputs, strict=True)}

    def chunk(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
              state: torch.Tensor, noises: torch.Tensor, steps: int, num_samples: int,
              timer: StageTimer | None = None) -> torch.Tensor:
        self._check_settings(steps, num_samples)
        feeds = {"language": language.float().cpu().numpy(),
                 "state": state.float().cpu().numpy(), "noises": noises.float().cpu().numpy()}
        feeds.update({k: frames[k].float().cpu().numpy() for k in self.feature_keys})
        with timed(timer, "sampler"):
            (chunk,) = self.chunk_session.run(
                None, {k: v for k, v in feeds.items() if k in self.chunk_inputs})
        return torch.from_numpy(chunk)


def _platform_difference(key: str, packaged: object, here: object) -> str:
    """What an AOTInductor manifest's ``key`` says against this machine, in words."""
    if key == "cpu_instruction_sets" and packaged is None:
        return "a CPU its manifest does not name (exported before manifests recorded it)"
    if key == "cpu_instruction_sets" and isinstance(packaged, list) and isinstance(here, list):
        missing = sorted(set(packaged) - set(here))
        unused = sorted(set(here) - set(packaged))
        if missing:
            return (f"another CPU: it may use {', '.join(missing)}, which this CPU lacks "
                    f"(running it would end the process with an illegal instruction)")
        return (f"another CPU, without {', '.join(unused)} that this CPU has (it would run, "
                f"slower than a package compiled here)")
    return f"{key} {packaged!r}, this machine has {here!r}"


class AotInductorBackend(_ExportedGraphs):
    """The packages ``dpr export --format aotinductor`` compiled on this machine: each
    graph is one shared library with the weights frozen in, called without Python
    between its operators.

    Refuses (``BackendError``) what ``read_manifest`` refuses, packages built by another
    torch or for another CPU architecture, packages compiled for another intra-op
    thread count than ``threads`` (Inductor fixes it in the generated code; at another
    count they run several times slower), and package files whose sha256 is not the
    manifest's (a partial copy or a rebuild without its manifest).
    """

    name = "aotinductor"
    graphs = "AOTInductor packages"

    def __init__(self, aot_dir: str | Path, weights_sha256: str | None, steps: int,
                 num_samples: int, chunk_lowpass_terms: int = 0, *, threads: int):
        from diffusion_policy_ros.policy.export import (
            AOT_MANIFEST,
            AOT_MANIFEST_FORMAT,
            AOT_PACKAGES,
            aot_platform,
            file_sha256,
        )

        aot_dir = Path(aot_dir)
        manifest = read_manifest(aot_dir / AOT_MANIFEST, AOT_MANIFEST_FORMAT, weights_sha256,
                                 steps, num_samples, chunk_lowpass_terms,
                                 f"dpr export --format aotinductor --threads {threads} "
                                 f"--checkpoint CKPT")
        for key, here in aot_platform().items():
            if manifest.get(key) != here:
                raise BackendError(f"{aot_dir} was compiled for "
                                   f"{_platform_difference(key, manifest.get(key), here)}: "
                                   f"export again here")
        if manifest.get("threads_at_export") != threads:
            raise BackendError(f"{aot_dir} was compiled for {manifest.get('threads_at_export')} "
                               f"intra-op thread(s), this process runs {threads}, at which "
                               f"the packages run several times slower: dpr export --format "
                               f"aotinductor --threads {threads}")
        packages = []
        for name in AOT_PACKAGES:
            path = aot_dir / name
            if not path.exists():
                raise BackendError(f"{path} not found: export again")
            if file_sha256(path) != manifest.get("packages_sha256", {}).get(name):
                raise BackendError(f"{path} does not match its manifest's sha256: "
                                   f"export again")
            try:
                packages.append(torch._inductor.aoti_load_package(str(path)))
            except Exception as exc:  # noqa: BLE001 - the loader raises RuntimeError and others
                raise BackendError(f"cannot load {path} ({type(exc).__name__}: {exc})") from exc
        self.image_package, self.cloud_package, self.chunk_package = packages
        self._accept(manifest, steps, num_samples)

    def encode_image(self, image: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "image_encoder"):
            (tokens,) = self.image_package(*_dense(image))
        return {"image_tokens": tokens}

    def encode_cloud(self, points: torch.Tensor, colors: torch.Tensor, language: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "cloud_encoder"):
            outputs = self.cloud_package(*_dense(points.float(), colors, language.float()))
        return dict(zip(self.cloud_keys, outputs, strict=True))

    def chunk(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
              state: torch.Tensor, noises: torch.Tensor, steps: int, num_samples: int,
              timer: StageTimer | None = None) -> torch.Tensor:
        self._check_settings(steps, num_samples)
        with timed(timer, "sampler"):
            return self.chunk_package(*_dense(language.float(), state.float(), noises.float(),
                                              *(frames[k].float() for k in self.feature_keys)))


def _dense(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """CPU, C-contiguous copies where needed: a compiled package indexes its inputs with
    the strides it was exported with and reads any other layout wrongly, without an
    error (a point-colour array in Fortran order from the camera path did)."""
    return [t.cpu().contiguous() for t in tensors]
