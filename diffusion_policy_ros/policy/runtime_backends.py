"""Runtime backends of ``PolicyRunner``: the two halves of a chunk on eager torch or on
ONNX Runtime (``policy/export.py`` writes the graphs).

- ``encode_frame``: one camera frame + instruction -> per-frame features
  (``DiffusionPolicy.encode_frames``), cached per frame by the runner.
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

BACKENDS = ("torch", "onnxruntime")


class TorchBackend:
    """Eager PyTorch on the policy's device."""

    name = "torch"

    def __init__(self, policy: DiffusionPolicy):
        self.policy = policy

    def encode_frame(self, image: torch.Tensor, points: torch.Tensor, colors: torch.Tensor,
                     language: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        return self.policy.encode_frames(image, points, colors, language, timer)

    def chunk(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
              state: torch.Tensor, noises: torch.Tensor, steps: int, num_samples: int,
              timer: StageTimer | None = None) -> torch.Tensor:
        cond, _ = self.policy.condition_from_frames(frames, language, state, timer)
        with timed(timer, "sampler"):
            return self.policy.chunk_from_condition(cond, state, noises, steps, num_samples,
                                                    timer)


class BackendError(ValueError):
    """A backend cannot run this checkpoint; the message says why and what to do."""


class OnnxRuntimeBackend:
    """The graphs ``dpr export`` wrote, on ONNX Runtime's CPU execution provider.

    Refuses (``BackendError``) a missing onnxruntime, missing graphs, graphs exported
    from other weights (the manifest's sha256 against the checkpoint's), or a step
    count / K / chunk low-pass other than the graphs were exported with (all are fixed
    in them).
    """

    name = "onnxruntime"

    def __init__(self, onnx_dir: str | Path, weights_sha256: str | None, steps: int,
                 num_samples: int, num_threads: int | None = None,
                 chunk_lowpass_terms: int = 0):
        try:
            import onnxruntime
        except ImportError as exc:
            raise BackendError("backend 'onnxruntime' needs the onnxruntime package "
                               "(pip install onnxruntime)") from exc
        from diffusion_policy_ros.policy.export import (
            CHUNK_GRAPH,
            FRAME_GRAPH,
            MANIFEST,
            MANIFEST_FORMAT,
        )

        onnx_dir = Path(onnx_dir)
        manifest_path = onnx_dir / MANIFEST
        if not manifest_path.exists():
            raise BackendError(f"{manifest_path} not found: export the checkpoint first "
                               f"(dpr export --checkpoint CKPT)")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BackendError(f"{manifest_path} is unreadable ({exc}): export again") from exc
        if manifest.get("format") != MANIFEST_FORMAT:
            raise BackendError(f"{manifest_path}: format {manifest.get('format')!r}, expected "
                               f"{MANIFEST_FORMAT!r}: export again")
        if weights_sha256 and manifest.get("weights_sha256") != weights_sha256:
            raise BackendError(f"{onnx_dir} was exported from other weights (sha256 "
                               f"{str(manifest.get('weights_sha256'))[:12]}..., the checkpoint "
                               f"has {weights_sha256[:12]}...): export this checkpoint again")
        for name, wanted in (("num_inference_steps", steps), ("num_samples", num_samples),
                             ("chunk_lowpass_terms", chunk_lowpass_terms)):
            if manifest.get(name, 0) != wanted:
                raise BackendError(f"{onnx_dir} was exported with {name} "
                                   f"{manifest.get(name)}, asked for {wanted}: export with "
                                   f"dpr export --steps/--samples or use those values")
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = num_threads or torch.get_num_threads()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        try:
            self.frame_session = onnxruntime.InferenceSession(str(onnx_dir / FRAME_GRAPH),
                                                              options, providers=providers)
            self.chunk_session = onnxruntime.InferenceSession(str(onnx_dir / CHUNK_GRAPH),
                                                              options, providers=providers)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise BackendError(f"ONNX Runtime cannot load {onnx_dir} "
                               f"({type(exc).__name__}: {exc})") from exc
        # The exporter drops inputs a graph does not use (the instruction, for a frame
        # encoder without grounding): feed only what each session declares.
        self.frame_inputs = {i.name for i in self.frame_session.get_inputs()}
        self.chunk_inputs = {i.name for i in self.chunk_session.get_inputs()}
        self.manifest = manifest
        self.feature_keys = list(manifest["frame_features"])
        self.steps, self.num_samples = steps, num_samples

    def encode_frame(self, image: torch.Tensor, points: torch.Tensor, colors: torch.Tensor,
                     language: torch.Tensor,
                     timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        with timed(timer, "frame_encoder"):
            feeds = {"image": image.cpu().numpy(), "points": points.float().cpu().numpy(),
                     "colors": colors.cpu().numpy(), "language": language.float().cpu().numpy()}
            outputs = self.frame_session.run(
                None, {k: v for k, v in feeds.items() if k in self.frame_inputs})
        return {k: torch.from_numpy(v) for k, v in zip(self.feature_keys, outputs, strict=True)}

    def chunk(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
              state: torch.Tensor, noises: torch.Tensor, steps: int, num_samples: int,
              timer: StageTimer | None = None) -> torch.Tensor:
        if (steps, num_samples) != (self.steps, self.num_samples):
            raise BackendError(f"the ONNX graphs run {self.steps} steps x K "
                               f"{self.num_samples}, asked for {steps} x {num_samples}")
        feeds = {"language": language.float().cpu().numpy(),
                 "state": state.float().cpu().numpy(), "noises": noises.float().cpu().numpy()}
        feeds.update({k: frames[k].float().cpu().numpy() for k in self.feature_keys})
        with timed(timer, "sampler"):
            (chunk,) = self.chunk_session.run(
                None, {k: v for k, v in feeds.items() if k in self.chunk_inputs})
        return torch.from_numpy(chunk)
