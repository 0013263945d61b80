"""``dpr export``: static graphs (ONNX) of a checkpoint, checked against torch."""

from __future__ import annotations

import argparse
import json

from diffusion_policy_ros.config import SHIPPED_CHECKPOINT


def add_parser(sub) -> None:
    export = sub.add_parser("export", help="static graphs (ONNX) of a checkpoint for "
                            "policy_node's onnxruntime backend, checked against torch")
    export.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT),
                        help="checkpoint directory (default: the shipped policy)")
    export.add_argument("--out", help="directory of the graphs (default CHECKPOINT/onnx)")
    export.add_argument("--steps", type=int, help="sampler steps unrolled in the graph "
                        "(default: the checkpoint's)")
    export.add_argument("--samples", type=int, help="chunks per observation, medoid "
                        "(default: the checkpoint's)")
    export.add_argument("--check-data", metavar="DIR",
                        help="episode bags: compare ONNX Runtime with torch on the first "
                        "episode's recorded observations (max |difference| reported)")
    export.add_argument("--check-chunks", type=int, default=20)
    export.add_argument("--threads", type=int, default=1)
    export.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from diffusion_policy_ros.learning.dataset import episode_dirs
    from diffusion_policy_ros.learning.episode_bag import read_episode
    from diffusion_policy_ros.policy.checkpoint import load_checkpoint
    from diffusion_policy_ros.policy.export import (
        compare_backends,
        export_onnx,
        recorded_histories,
    )
    from diffusion_policy_ros.policy.runner import ONNX_SUBDIR, PolicyRunner

    out = Path(args.out) if args.out else Path(args.checkpoint) / ONNX_SUBDIR
    policy, metadata = load_checkpoint(args.checkpoint)
    manifest = export_onnx(policy, out, metadata.get("weights_sha256"), args.steps,
                           args.samples)
    print(f"exported {manifest['sampler']} x {manifest['num_inference_steps']} steps, K "
          f"{manifest['num_samples']} to {out}")
    if not args.check_data:
        return 0
    kwargs = {"num_inference_steps": manifest["num_inference_steps"],
              "num_samples": manifest["num_samples"], "num_threads": args.threads,
              "device": "cpu"}
    reference = PolicyRunner.from_checkpoint(args.checkpoint, **kwargs)
    candidate = PolicyRunner.from_checkpoint(args.checkpoint, backend="onnxruntime",
                                             onnx_dir=out, language=reference.language,
                                             **kwargs)
    episode = read_episode(episode_dirs(args.check_data)[0], policy.config.horizon,
                           policy.config.action_dt_s)
    histories, instruction = recorded_histories(episode, args.check_chunks,
                                                policy.config.n_obs_steps)
    diff = compare_backends(reference, candidate, histories, instruction)
    report = {**manifest, "check": {"episode": str(episode.path), **diff}}
    (out / "onnx.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"onnxruntime vs torch on {diff['chunks']} recorded observations of "
          f"{episode.path.name}: max |diff| {diff['max_abs']:.2e}, median "
          f"{diff['median_abs']:.2e} (rad / m)")
    return 0
