"""``dpr distill``: consistency distillation of a trained policy."""

from __future__ import annotations

import argparse

from diffusion_policy_ros.config import CONFIG_DIR


def add_parser(sub) -> None:
    distill = sub.add_parser("distill", help="consistency distillation: a few-step student "
                             "of a DDIM-trained checkpoint (same encoders and normaliser)")
    distill.add_argument("--teacher", required=True, help="teacher checkpoint directory")
    distill.add_argument("--data", required=True, nargs="+",
                         help="directory (or directories) of episode_* bags")
    distill.add_argument("--out", required=True, help="run directory (log, conditions cache, "
                         "checkpoint)")
    distill.add_argument("--distill-config", help="settings (default config/distill.yaml)")
    distill.add_argument("--steps", type=int)
    distill.add_argument("--batch-size", type=int)
    distill.add_argument("--lr", type=float, help="peak learning rate of the student")
    distill.add_argument("--anchor-weight", type=float,
                         help="weight of the first-step anchor to the teacher's DDIM chunk")
    distill.add_argument("--student-prediction", choices=("sample", "epsilon"),
                         help="what the student's denoiser outputs (default: the settings')")
    distill.add_argument("--student-width", type=int, metavar="CHANNELS",
                         help="a narrower U-Net student: its full-resolution channels "
                         "(default: the teacher's width, from its weights)")
    distill.add_argument("--init-student", metavar="CHECKPOINT",
                         help="continue from an earlier student of the same teacher")
    distill.add_argument("--sampling-steps", type=int,
                         help="the student's default consistency steps (1, 2, 4)")
    distill.add_argument("--max-minutes", type=float)
    distill.add_argument("--threads", type=int, help="torch intra-op threads")
    distill.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    distill.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.distill import distill
    from diffusion_policy_ros.learning.distill_config import load_distill_config

    overrides = {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                 "init_student": args.init_student, "anchor_weight": args.anchor_weight,
                 "student_prediction_type": args.student_prediction,
                 "student_unet_base_dim": args.student_width,
                 "sampling_steps": args.sampling_steps, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads}
    config = load_distill_config(args.distill_config or CONFIG_DIR / "distill.yaml",
                                 overrides)
    path = distill(args.teacher, args.data, config, args.out)
    print(f"checkpoint: {path}")
    return 0
