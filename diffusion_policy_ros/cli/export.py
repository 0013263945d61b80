"""``dpr export``: static graphs of a checkpoint (ONNX, or AOTInductor packages compiled
for this machine), checked against torch."""

from __future__ import annotations

import argparse
import json

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT

FORMATS = {"onnx": "onnxruntime", "aotinductor": "aotinductor"}
"""--format: the policy_node backend that runs it."""


def add_parser(sub) -> None:
    export = sub.add_parser("export", help="static graphs of a checkpoint for policy_node's "
                            "onnxruntime or aotinductor backend, checked against torch")
    export.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT),
                        help="checkpoint directory (default: the shipped policy)")
    export.add_argument("--format", choices=list(FORMATS), default="onnx",
                        help="onnx (ONNX Runtime) or aotinductor (torch.export + Inductor "
                        "compiled to a shared library for this CPU; needs a C++ compiler, "
                        "three to four minutes on 2 cores, most of it autotuning the chunk "
                        "head's GEMMs)")
    export.add_argument("--out", help="directory of the graphs (default CHECKPOINT/onnx or "
                        "CHECKPOINT/aot/threads_N)")
    export.add_argument("--steps", type=int, help="sampler steps unrolled in the graph "
                        "(default: the checkpoint's)")
    export.add_argument("--samples", type=int, help="chunks per observation, medoid "
                        "(default: the checkpoint's)")
    export.add_argument("--check-data", metavar="DIR",
                        help="episode bags: compare the exported graphs with torch on the "
                        "first episode's recorded observations (max |difference| reported)")
    export.add_argument("--check-chunks", type=int, default=20)
    export.add_argument("--if-stale", action="store_true",
                        help="do nothing when the graphs in --out already belong to this "
                        "checkpoint, step count, K and (aotinductor) this torch, CPU, "
                        "--threads and Inductor options")
    export.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads; AOTInductor packages are compiled for "
                        "this count and run only at it (policy_node's num_threads, default "
                        "1)")
    export.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from diffusion_policy_ros.learning.dataset import episode_dirs
    from diffusion_policy_ros.learning.episode_bag import read_episode
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint
    from diffusion_policy_ros.policy.export import (
        MANIFESTS,
        aot_options_changed,
        compare_backends,
        export_aot,
        export_onnx,
        recorded_histories,
    )
    from diffusion_policy_ros.policy.runner import PolicyRunner, default_graph_dir
    from diffusion_policy_ros.policy.runtime_backends import (
        AotInductorBackend,
        BackendError,
        OnnxRuntimeBackend,
    )

    backend = FORMATS[args.format]
    out = Path(args.out) if args.out else default_graph_dir(args.checkpoint, backend,
                                                            args.threads)
    policy, metadata = load_checkpoint(args.checkpoint)
    if args.if_stale:
        c = policy.config
        settings = {"steps": args.steps or c.num_inference_steps,
                    "num_samples": args.samples or c.num_samples,
                    "chunk_lowpass_terms": c.chunk_lowpass_terms}
        try:
            if backend == "aotinductor":
                current = AotInductorBackend(out, metadata.get("weights_sha256"), **settings,
                                             threads=args.threads)
                if changed := aot_options_changed(current.manifest):
                    raise BackendError(f"{out} was {changed}")
            else:
                OnnxRuntimeBackend(out, metadata.get("weights_sha256"), **settings)
        except BackendError as exc:
            print(f"exporting: {exc}")
        else:
            print(f"{out} is up to date")
            return 0
    torch.set_num_threads(args.threads)
    exporter = export_aot if args.format == "aotinductor" else export_onnx
    manifest = exporter(policy, out, metadata.get("weights_sha256"), args.steps, args.samples)
    print(f"exported {manifest['sampler']} x {manifest['num_inference_steps']} steps, K "
          f"{manifest['num_samples']} as {args.format} to {out}")
    if not args.check_data:
        return 0
    kwargs = {"num_inference_steps": manifest["num_inference_steps"],
              "num_samples": manifest["num_samples"], "num_threads": args.threads,
              "device": "cpu"}
    reference = PolicyRunner.from_checkpoint(args.checkpoint, **kwargs)
    candidate = PolicyRunner.from_checkpoint(args.checkpoint, backend=backend, graph_dir=out,
                                             language=reference.language, **kwargs)
    episode = read_episode(episode_dirs(args.check_data)[0], policy.config.horizon,
                           policy.config.action_dt_s)
    histories, instruction = recorded_histories(episode, args.check_chunks,
                                                policy.config.n_obs_steps)
    diff = compare_backends(reference, candidate, histories, instruction)
    report = {**manifest, "check": {"episode": str(episode.path), **diff}}
    (out / MANIFESTS[backend]).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{backend} vs torch on {diff['chunks']} recorded observations of "
          f"{episode.path.name}: max |diff| {diff['max_abs']:.2e}, median "
          f"{diff['median_abs']:.2e} (rad / m)")
    return 0
