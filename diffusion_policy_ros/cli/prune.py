"""``dpr prune``: learnable N:M layer pruning of the DiT denoiser."""

from __future__ import annotations

import argparse

from diffusion_policy_ros.config import CONFIG_DIR


def add_parser(sub) -> None:
    prune = sub.add_parser("prune", help="learnable N:M layer pruning of the DiT denoiser "
                           "(LightDP): --stage teacher trains a full DiT on a checkpoint's "
                           "conditions, prune gates + fine-tunes, distill consistency-distils "
                           "a pruned student from the full DiT")
    prune.add_argument("--stage", choices=["teacher", "prune", "distill"], default="prune")
    prune.add_argument("--teacher", required=True, help="stage teacher: checkpoint whose "
                       "encoders are kept (e.g. checkpoints/grasp_unet); prune, distill: the "
                       "full DiT checkpoint")
    prune.add_argument("--student", help="stage distill: the pruned checkpoint (dpr prune)")
    prune.add_argument("--data", required=True, nargs="+",
                       help="directory (or directories) of episode_* bags")
    prune.add_argument("--out", required=True, help="run directory (log, checkpoint)")
    prune.add_argument("--conditions", help="directory of cached conditions_{train,val}_*."
                       "safetensors of the same encoders and data (e.g. a dpr distill run); "
                       "default --out")
    prune.add_argument("--prune-config", help="settings (default config/prune.yaml)")
    prune.add_argument("--distill-config", help="stage distill settings (default "
                       "config/distill.yaml)")
    prune.add_argument("--pattern", help="N:M, keep N of every M consecutive blocks (3:4, 2:4)")
    prune.add_argument("--teacher-steps", type=int)
    prune.add_argument("--gate-steps", type=int)
    prune.add_argument("--finetune-steps", type=int)
    prune.add_argument("--distill-steps", type=int)
    prune.add_argument("--sampling-steps", type=int,
                       help="stage distill: the student's default consistency steps")
    prune.add_argument("--batch-size", type=int)
    prune.add_argument("--max-minutes", type=float, help="per training phase")
    prune.add_argument("--threads", type=int, help="torch intra-op threads")
    prune.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    prune.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.distill_config import load_distill_config
    from diffusion_policy_ros.learning.prune import distill_pruned, prune, train_teacher
    from diffusion_policy_ros.learning.prune_config import load_prune_config

    overrides = {"pattern": args.pattern, "teacher_steps": args.teacher_steps,
                 "gate_steps": args.gate_steps, "finetune_steps": args.finetune_steps,
                 "batch_size": args.batch_size, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads}
    common = {"data_dirs": args.data, "out": args.out, "conditions_dir": args.conditions}
    config = load_prune_config(args.prune_config or CONFIG_DIR / "prune.yaml", overrides)
    if args.stage == "teacher":
        path = train_teacher(args.teacher, config=config, **common)
    elif args.stage == "prune":
        path = prune(args.teacher, config=config, **common)
    else:
        if not args.student:
            raise ValueError("--stage distill needs --student (a dpr prune checkpoint)")
        distill_config = load_distill_config(
            args.distill_config or CONFIG_DIR / "distill.yaml",
            {"steps": args.distill_steps, "batch_size": args.batch_size,
             "max_minutes": args.max_minutes, "device": args.device,
             "num_threads": args.threads, "sampling_steps": args.sampling_steps})
        path = distill_pruned(args.teacher, args.student, config=config,
                              distill_config=distill_config, **common)
    print(f"checkpoint: {path}")
    return 0
