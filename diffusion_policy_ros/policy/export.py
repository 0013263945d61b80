"""Static-graph export of a policy checkpoint (``dpr export``): ONNX for ONNX Runtime,
or AOTInductor packages (``torch.export`` + Inductor compiled ahead of time to a
shared library for this machine's CPU).

A chunk is three graphs with fixed shapes, split where ``PolicyRunner`` caches:

- ``image_encoder.onnx`` / ``.pt2``: one camera frame's image uint8 (1, 3, H, W) -> its
  tokens (``DiffusionPolicy.encode_images``), run once per frame, and by
  ``policy_node`` as soon as the image arrives, while the frame's cloud is on its way;
- ``cloud_encoder.onnx`` / ``.pt2``: the frame's cloud (points (1, N, 3) base_link m,
  colours uint8 (1, N, 3)) + instruction embedding (1, L) -> its tokens and grounded
  target (``DiffusionPolicy.encode_clouds``), run once per frame;
- ``chunk.onnx`` / ``.pt2``: the To frames' features + instruction + joint states (1, To, D) +
  initial noise (S, K, T, D) -> (1, T, D) joint targets: fusion, the fixed-step
  sampler (DDIM or consistency, unrolled), the medoid of K and un-normalisation.

The noise is an input, so the graph is deterministic and checked against eager
torch on the same inputs. The manifest beside the graphs (``onnx.json`` /
``aot.json``) names the checkpoint's weights hash, the sampler, steps, K and every
input and output shape; a backend refuses graphs whose manifest does not match the
checkpoint it is asked to run. An AOTInductor package is native code built for one
torch version and CPU: its manifest records both and each package's sha256, and it is
meant to be built where it runs, not copied from elsewhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from diffusion_policy_ros.errors import InputError
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

MANIFEST = "onnx.json"
IMAGE_GRAPH = "image_encoder.onnx"
CLOUD_GRAPH = "cloud_encoder.onnx"
CHUNK_GRAPH = "chunk.onnx"
GRAPHS = (IMAGE_GRAPH, CLOUD_GRAPH, CHUNK_GRAPH)
MANIFEST_FORMAT = "diffusion_policy_ros.onnx/2"
AOT_MANIFEST = "aot.json"
AOT_IMAGE_PACKAGE = "image_encoder.pt2"
AOT_CLOUD_PACKAGE = "cloud_encoder.pt2"
AOT_CHUNK_PACKAGE = "chunk.pt2"
AOT_PACKAGES = (AOT_IMAGE_PACKAGE, AOT_CLOUD_PACKAGE, AOT_CHUNK_PACKAGE)
AOT_MANIFEST_FORMAT = "diffusion_policy_ros.aotinductor/2"
#: Inductor's options per package. Every graph is frozen (weights folded in as
#: constants). The chunk head's matrix products are small (K x horizon rows at most),
#: where oneDNN's prepacked linear spends more in its call than in the product: its
#: GEMMs are autotuned, each timed against Inductor's own C++ micro-kernels, which
#: makes the export several times longer. The encoders' larger products gain nothing
#: from it (``dpr bench aot`` measures both).
AOT_FROZEN: dict[str, object] = {"freezing": True}
AOT_FROZEN_AUTOTUNED = {**AOT_FROZEN, "max_autotune": True,
                        "max_autotune_gemm_backends": "CPP,ATEN"}
AOT_INDUCTOR_CONFIGS: dict[str, dict[str, object]] = {
    AOT_IMAGE_PACKAGE: AOT_FROZEN, AOT_CLOUD_PACKAGE: AOT_FROZEN,
    AOT_CHUNK_PACKAGE: AOT_FROZEN_AUTOTUNED}
MANIFESTS = {"onnxruntime": MANIFEST, "aotinductor": AOT_MANIFEST}
"""The manifest file of each static-graph backend's export."""


IMAGE_FEATURE_KEYS = ("image_tokens",)
"""The image encoder's outputs."""


def cloud_feature_keys(policy: DiffusionPolicy) -> list[str]:
    """The cloud encoder's outputs, in graph order."""
    keys = ["point_tokens", "point_centres"]
    if policy.grounding is not None:
        keys += ["target_centre", "target_shape"]
    return keys


def frame_feature_keys(policy: DiffusionPolicy) -> list[str]:
    """Every per-frame feature, in the chunk graph's input order."""
    return [*IMAGE_FEATURE_KEYS, *cloud_feature_keys(policy)]


class ImageEncoderGraph(nn.Module):
    def __init__(self, policy: DiffusionPolicy):
        super().__init__()
        self.policy = policy

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = self.policy.encode_images(image)
        return tuple(features[k] for k in IMAGE_FEATURE_KEYS)


class CloudEncoderGraph(nn.Module):
    def __init__(self, policy: DiffusionPolicy):
        super().__init__()
        self.policy = policy
        self.keys = cloud_feature_keys(policy)

    def forward(self, points: torch.Tensor, colors: torch.Tensor,
                language: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = self.policy.encode_clouds(points, colors, language)
        return tuple(features[k] for k in self.keys)


class ChunkGraph(nn.Module):
    def __init__(self, policy: DiffusionPolicy, steps: int, num_samples: int):
        super().__init__()
        self.policy = policy
        self.keys = frame_feature_keys(policy)
        self.steps = steps
        self.num_samples = num_samples

    def forward(self, language: torch.Tensor, state: torch.Tensor, noises: torch.Tensor,
                *frames: torch.Tensor) -> torch.Tensor:
        cond, _ = self.policy.condition_from_frames(dict(zip(self.keys, frames, strict=True)),
                                                    language, state)
        return self.policy.chunk_from_condition(cond, state, noises, self.steps,
                                                self.num_samples)


def example_inputs(policy: DiffusionPolicy, steps: int, num_samples: int,
                   seed: int = 0) -> tuple[dict, dict]:
    """Random (frame inputs, chunk inputs without the frame features) of the right shapes."""
    c = policy.config
    g = torch.Generator().manual_seed(seed)
    h, w = c.image_size
    frame = {"image": torch.randint(0, 256, (1, 3, h, w), generator=g, dtype=torch.uint8),
             "points": torch.rand((1, c.num_points, 3), generator=g) * 0.6
             + torch.tensor([0.2, -0.3, 0.0]),
             "colors": torch.randint(0, 256, (1, c.num_points, 3), generator=g,
                                     dtype=torch.uint8),
             "language": torch.nn.functional.normalize(
                 torch.randn((1, c.language_dim), generator=g), dim=-1)}
    chunk = {"language": frame["language"],
             "state": torch.rand((1, c.n_obs_steps, c.state_dim), generator=g) - 0.5,
             "noises": policy.initial_noise(num_samples, steps, g)}
    return frame, chunk


def _export(module: nn.Module, args: tuple, path: Path, input_names: Sequence[str],
            output_names: Sequence[str], opset: int) -> None:
    # nn.MultiheadAttention's inference fast path is one fused op that ONNX lacks; the
    # composite path exports as plain matmuls and softmax.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        _export_graph(module, args, path, input_names, output_names, opset)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _export_graph(module: nn.Module, args: tuple, path: Path, input_names: Sequence[str],
                  output_names: Sequence[str], opset: int) -> None:
    torch.onnx.export(module, args, str(path), input_names=list(input_names),
                      output_names=list(output_names), opset_version=opset, dynamo=False,
                      do_constant_folding=True)


def _clear_other_graphs(out_dir: Path, suffix: str, written: Sequence[str]) -> None:
    """Make ``out_dir`` and remove the graphs of this format that this export does not
    write (an earlier layout's, such as the single frame encoder before the split)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in out_dir.glob(f"*{suffix}"):
        if path.name not in written:
            path.unlink()


@torch.no_grad()
def export_onnx(policy: DiffusionPolicy, out_dir: str | Path, weights_sha256: str | None,
                steps: int | None = None, num_samples: int | None = None,
                opset: int = 18) -> dict:
    """Write the three graphs and the manifest into ``out_dir``; return the manifest."""
    out_dir, graphs = Path(out_dir), ExportGraphs.of(policy, steps, num_samples)
    _clear_other_graphs(out_dir, ".onnx", GRAPHS)
    _export(graphs.image_encoder, graphs.image_args, out_dir / IMAGE_GRAPH, ["image"],
            list(IMAGE_FEATURE_KEYS), opset)
    _export(graphs.cloud_encoder, graphs.cloud_args, out_dir / CLOUD_GRAPH,
            ["points", "colors", "language"], graphs.cloud_encoder.keys, opset)
    _export(graphs.head, graphs.chunk_args, out_dir / CHUNK_GRAPH,
            [*graphs.chunk_in, *frame_feature_keys(graphs.policy)], ["chunk"], opset)
    manifest = {"format": MANIFEST_FORMAT, **graphs.manifest(weights_sha256), "opset": opset}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


@dataclasses.dataclass
class ExportGraphs:
    """The three modules an export traces, with example inputs of the exported shapes."""

    policy: DiffusionPolicy
    image_encoder: ImageEncoderGraph
    cloud_encoder: CloudEncoderGraph
    head: ChunkGraph
    frame_in: dict[str, torch.Tensor]
    chunk_in: dict[str, torch.Tensor]
    """Without the frame features, which ``chunk_args`` appends."""
    features: tuple[torch.Tensor, ...]
    """The encoders' outputs on ``frame_in`` (``frame_feature_keys`` order): the
    per-frame feature shapes."""

    @classmethod
    @torch.no_grad()
    def of(cls, policy: DiffusionPolicy, steps: int | None,
           num_samples: int | None) -> ExportGraphs:
        """Graphs of ``policy`` (moved to the CPU in fp32) for ``steps`` x K
        ``num_samples`` (default: the checkpoint's)."""
        policy = policy.to("cpu").eval().float()
        c = policy.config
        steps = steps or c.num_inference_steps
        k = num_samples or c.num_samples
        frame_in, chunk_in = example_inputs(policy, steps, k)
        image_encoder, cloud_encoder = ImageEncoderGraph(policy), CloudEncoderGraph(policy)
        features = (*image_encoder(frame_in["image"]),
                    *cloud_encoder(frame_in["points"], frame_in["colors"], frame_in["language"]))
        return cls(policy, image_encoder, cloud_encoder, ChunkGraph(policy, steps, k), frame_in,
                   chunk_in, features)

    @property
    def image_args(self) -> tuple[torch.Tensor, ...]:
        return (self.frame_in["image"],)

    @property
    def cloud_args(self) -> tuple[torch.Tensor, ...]:
        return self.frame_in["points"], self.frame_in["colors"], self.frame_in["language"]

    @property
    def chunk_args(self) -> tuple[torch.Tensor, ...]:
        """The chunk head's inputs: each frame's features repeated over the To history."""
        to = self.policy.config.n_obs_steps
        frames = (f[:, None].expand(-1, to, *f.shape[1:]).contiguous() for f in self.features)
        return (*self.chunk_in.values(), *frames)

    def manifest(self, weights_sha256: str | None) -> dict:
        """What both graph formats record: the weights, the sampler and every shape."""
        c = self.policy.config
        return {
            "weights_sha256": weights_sha256, "sampler": c.sampler,
            "num_inference_steps": self.head.steps, "num_samples": self.head.num_samples,
            "chunk_lowpass_terms": c.chunk_lowpass_terms, "n_obs_steps": c.n_obs_steps,
            "frame_inputs": {n: list(t.shape) for n, t in self.frame_in.items()},
            "frame_features": {n: list(t.shape[1:]) for n, t in
                               zip(frame_feature_keys(self.policy), self.features, strict=True)},
            "chunk_inputs": {n: list(t.shape) for n, t in self.chunk_in.items()},
            "chunk_output": [1, c.horizon, c.action_dim],
        }


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# /proc/cpuinfo flags that name instruction-set extensions: Inductor compiles packages
# with -march=native, so a package may use any of the exporting CPU's and dies of SIGILL
# on a CPU without one (e.g. AVX-512 code on an AVX2-only host).
_ISA_FLAG = re.compile(r"^(avx|sse|ssse|fma|f16c|bmi|amx|aes|vaes|pclmul|vpclmul|gfni|adx|"
                       r"movbe|popcnt|abm|lzcnt|sha|xop|tbm|asimd|sve|neon|fp16|bf16|i8mm)")


def cpu_instruction_sets(cpuinfo: str | Path = "/proc/cpuinfo") -> list[str]:
    """Sorted instruction-set extensions of this CPU (x86 ``flags`` / Arm ``Features`` of
    the first processor in ``cpuinfo``); empty where that file is missing."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted({f for f in value.split() if _ISA_FLAG.match(f)})
    return []


def aot_options_changed(manifest: dict) -> str:
    """Why packages with this manifest were compiled otherwise than ``export_aot`` would
    compile them now ('' when they were not): they run, but slower than an export today."""
    if manifest.get("inductor_configs") != AOT_INDUCTOR_CONFIGS:
        return (f"compiled with Inductor options {manifest.get('inductor_configs')}, "
                f"this export uses {AOT_INDUCTOR_CONFIGS}")
    return ""


def aot_platform() -> dict[str, object]:
    """What an AOTInductor package is tied to: the torch build, the CPU architecture and
    the CPU's instruction-set extensions (the packages are compiled for this CPU)."""
    return {"torch": torch.__version__, "machine": platform.machine(),
            "cpu_instruction_sets": cpu_instruction_sets()}


def compile_aot_package(program: torch.export.ExportedProgram, path: Path,
                        options: Mapping[str, object]) -> None:
    """Compile ``program`` into the AOTInductor package ``path`` with Inductor ``options``.
    The compiler is handed a copy (it adds keys of its own to the dict it gets), and
    autotuning's table per GEMM is kept off stderr."""
    with torch._inductor.config.patch(autotune_num_choices_displayed=0,
                                      max_autotune_report_choices_stats=False):
        torch._inductor.aoti_compile_and_package(program, package_path=str(path),
                                                 inductor_configs=dict(options))


@torch.no_grad()
def export_aot(policy: DiffusionPolicy, out_dir: str | Path, weights_sha256: str | None,
               steps: int | None = None, num_samples: int | None = None,
               inductor_configs: Mapping[str, dict] | None = None) -> dict:
    """Compile the three graphs ahead of time with Inductor (needs a C++ compiler) into
    ``out_dir``; return the manifest.

    The weights are frozen into each package (Inductor's ``freezing``: constants
    folded, linear weights prepacked), so a package runs exactly one checkpoint; the
    chunk head's GEMMs are autotuned on this machine. ``inductor_configs`` (per package,
    default ``AOT_INDUCTOR_CONFIGS``) are recorded in the manifest.
    """
    configs = {name: dict(options) for name, options in
               (AOT_INDUCTOR_CONFIGS if inductor_configs is None else inductor_configs).items()}
    if policy.config.sampler != "consistency":
        raise InputError(f"dpr export --format aotinductor compiles consistency students "
                         f"(dpr distill); this checkpoint samples with "
                         f"{policy.config.sampler!r}, whose scheduler torch.export cannot "
                         f"trace: use --format onnx")
    out_dir, graphs = Path(out_dir), ExportGraphs.of(policy, steps, num_samples)
    _clear_other_graphs(out_dir, ".pt2", AOT_PACKAGES)
    packages = {}
    for name, module, args in ((AOT_IMAGE_PACKAGE, graphs.image_encoder, graphs.image_args),
                               (AOT_CLOUD_PACKAGE, graphs.cloud_encoder, graphs.cloud_args),
                               (AOT_CHUNK_PACKAGE, graphs.head, graphs.chunk_args)):
        path = out_dir / name
        path.unlink(missing_ok=True)
        compile_aot_package(torch.export.export(module, args), path, configs[name])
        packages[name] = file_sha256(path)
    manifest = {"format": AOT_MANIFEST_FORMAT, **graphs.manifest(weights_sha256),
                **aot_platform(), "threads_at_export": torch.get_num_threads(),
                "inductor_configs": configs, "packages_sha256": packages}
    (out_dir / AOT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n",
                                        encoding="utf-8")
    return manifest


def compare_backends(reference, candidate, observations_seq: Sequence[Sequence[dict]],
                     instruction: str, seed: int = 0) -> dict[str, float]:
    """Max and median |candidate - reference| (rad / m) of the chunks two runners compute
    for the same observation histories and noise."""
    diffs = []
    for i, history in enumerate(observations_seq):
        a = reference.predict(history, instruction, noise=seed + i)
        b = candidate.predict(history, instruction, noise=seed + i)
        diffs.append(np.abs(a - b))
    d = np.stack(diffs)
    return {"max_abs": float(d.max()), "median_abs": float(np.median(d)),
            "chunks": len(diffs)}


def recorded_histories(episode, count: int, n_obs_steps: int) -> tuple[list[list[dict]], str]:
    """Up to ``count`` To-frame histories (oldest first) spread over a recorded episode
    (``learning.episode_bag.EpisodeRecord``), and its instruction."""
    frames = [{"image": episode.images[i], "points": episode.points[i],
               "point_colors": episode.colors[i],
               "joint_positions": episode.joint_positions[i].astype(np.float32)}
              for i in range(len(episode))]
    ends = np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int)
    histories = [[frames[max(0, e - n_obs_steps + 1 + j)] for j in range(n_obs_steps)]
                 for e in ends]
    return histories, episode.instruction
