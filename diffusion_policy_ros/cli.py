"""``dpr``: the offline command line of diffusion_policy_ros."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys

from diffusion_policy_ros.config import CONFIG_DIR, SHIPPED_CHECKPOINT


def _run_main(module: str, argv: list[str] | None = None) -> int:
    main = importlib.import_module(module).main
    if argv is None:
        main()
    else:
        main(argv)
    return 0


def _bench_perception(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.perception import benchmark

    rows = benchmark.run(frames=args.frames)
    print(benchmark.format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


def _bench_tracker(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import tracker_bench

    return tracker_bench.run(seconds=args.seconds, priorities=tuple(args.priorities))


def _sync_demo(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import sync_demo

    return sync_demo.run(seconds=args.seconds, resolution=args.resolution)


def _bringup(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.ros import bringup

    return bringup.run(bringup.Options(
        sim=args.sim, episodes=args.episodes, instruction=args.instruction,
        switch_after_s=args.switch_after, checkpoint=args.checkpoint, seed=args.seed,
        out=args.out, device=args.device,
        num_inference_steps=args.num_inference_steps, ready_timeout_s=args.ready_timeout,
        namespace=args.namespace, use_sim_time=args.use_sim_time, rviz=args.rviz,
        sim_params=args.sim_param, sync_params=args.sync_param,
        policy_params=args.policy_param, tracker_params=args.tracker_param))


def _collect(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.collect import RecoveryConfig, SwitchConfig, collect
    from diffusion_policy_ros.policy.checkpoint import CheckpointError
    from diffusion_policy_ros.sim.pushes import PushConfig
    from diffusion_policy_ros.sim.sim_config import load_sim_config

    config = load_sim_config(args.config) if args.config else None
    try:
        report = collect(args.episodes, args.out, seed=args.seed, raw_camera=args.raw_camera,
                         config=config, pushes=PushConfig() if args.pushes else None,
                         switches=SwitchConfig() if args.switches else None,
                         recovery=(RecoveryConfig(args.recover_from) if args.recover_from
                                   else None))
    except (FileExistsError, CheckpointError, ValueError) as exc:
        print(f"dpr collect: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


def _train(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.train import train
    from diffusion_policy_ros.learning.train_config import load_train_config
    from diffusion_policy_ros.policy.configuration_diffusion import load_policy_config

    config = load_train_config(args.train_config) if args.train_config else load_train_config()
    try:
        policy_config = load_policy_config(args.config, args.set)
    except ValueError as exc:
        print(f"dpr train: {exc}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size),
                                   ("max_minutes", args.max_minutes), ("device", args.device))
                 if v is not None}
    config = dataclasses.replace(config, **overrides)
    try:
        path = train(args.data, policy_config, config, args.out, resume=args.resume)
    except FileExistsError as exc:
        print(f"dpr train: {exc}", file=sys.stderr)
        return 2
    print(f"checkpoint: {path}")
    return 0


def _distill(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.distill import distill
    from diffusion_policy_ros.learning.distill_config import load_distill_config
    from diffusion_policy_ros.policy.checkpoint import CheckpointError

    overrides = {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                 "init_student": args.init_student, "anchor_weight": args.anchor_weight,
                 "student_prediction_type": args.student_prediction,
                 "sampling_steps": args.sampling_steps, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads}
    try:
        config = load_distill_config(args.distill_config or CONFIG_DIR / "distill.yaml",
                                     overrides)
        path = distill(args.teacher, args.data, config, args.out)
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"dpr distill: {exc}", file=sys.stderr)
        return 2
    print(f"checkpoint: {path}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.distill_config import load_distill_config
    from diffusion_policy_ros.learning.prune import distill_pruned, prune, train_teacher
    from diffusion_policy_ros.learning.prune_config import load_prune_config
    from diffusion_policy_ros.policy.checkpoint import CheckpointError

    overrides = {"pattern": args.pattern, "teacher_steps": args.teacher_steps,
                 "gate_steps": args.gate_steps, "finetune_steps": args.finetune_steps,
                 "batch_size": args.batch_size, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads}
    common = {"data_dirs": args.data, "out": args.out, "conditions_dir": args.conditions}
    try:
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
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        print(f"dpr prune: {exc}", file=sys.stderr)
        return 2
    print(f"checkpoint: {path}")
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from diffusion_policy_ros.learning.finetune import FinetuneStopped, finetune
    from diffusion_policy_ros.learning.finetune_config import load_finetune_config
    from diffusion_policy_ros.policy.checkpoint import CheckpointError

    overrides = {"iterations": args.iterations, "num_envs": args.num_envs,
                 "steps_per_env": args.steps_per_env, "max_minutes": args.max_minutes,
                 "device": args.device, "num_threads": args.threads,
                 "depth_noise": True if args.depth_noise else None,
                 "switch_probability": args.switch_probability}
    try:
        config = load_finetune_config(args.finetune_config or CONFIG_DIR / "finetune.yaml",
                                      overrides)
        path = finetune(args.init, config, args.out, resume=args.resume)
    except (CheckpointError, FileExistsError, ValueError) as exc:
        print(f"dpr finetune: {exc}", file=sys.stderr)
        return 2
    except FinetuneStopped as exc:
        print(f"dpr finetune: {exc}", file=sys.stderr)
        return 3
    print(f"checkpoint: {path}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from diffusion_policy_ros.learning.dataset import episode_dirs
    from diffusion_policy_ros.learning.episode_bag import read_episode
    from diffusion_policy_ros.policy.checkpoint import CheckpointError, load_checkpoint
    from diffusion_policy_ros.policy.export import (
        compare_backends,
        export_onnx,
        recorded_histories,
    )
    from diffusion_policy_ros.policy.runner import ONNX_SUBDIR, PolicyRunner

    out = Path(args.out) if args.out else Path(args.checkpoint) / ONNX_SUBDIR
    try:
        policy, metadata = load_checkpoint(args.checkpoint)
        manifest = export_onnx(policy, out, metadata.get("weights_sha256"), args.steps,
                               args.samples)
    except (CheckpointError, ValueError) as exc:
        print(f"dpr export: {exc}", file=sys.stderr)
        return 2
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


def _eval_over_ros(args: argparse.Namespace) -> int:
    """``dpr eval --ros``: the same seeded episodes through the real nodes (``dpr bringup``)."""
    from diffusion_policy_ros.ros import bringup
    from diffusion_policy_ros.sim.task import SWITCH_AFTER_S

    if args.instructions == "wrong":
        print("dpr eval: --ros scores the sim's own instruction; --instructions wrong runs "
              "in process only", file=sys.stderr)
        return 2
    if args.noise == "fixed":
        print("dpr eval: --ros runs policy_node, which draws new noise for every chunk; "
              "--noise fixed runs in process only", file=sys.stderr)
        return 2
    if args.seed < 1:
        print("dpr eval: --ros needs --seed >= 1 (sim_node's start-up episode takes seed - 1)",
              file=sys.stderr)
        return 2
    return bringup.run(bringup.Options(
        episodes=args.episodes, seed=args.seed, checkpoint=args.checkpoint,
        switch_after_s=SWITCH_AFTER_S if args.instructions == "switch" else None,
        device=args.device, num_inference_steps=args.steps or 0, out=args.out,
        sim_params=["depth_noise:=true"] if args.depth_noise else []))


def _eval(args: argparse.Namespace) -> int:
    if args.ros:
        return _eval_over_ros(args)
    from diffusion_policy_ros.learning.evaluate import evaluate, write_report

    summary, outcomes = evaluate(args.checkpoint, args.episodes, args.seed,
                                 args.instructions, args.device, args.steps,
                                 media_dir=args.out, noise=args.noise,
                                 num_samples=args.samples, depth_noise=args.depth_noise,
                                 backend=args.backend)
    print(json.dumps(summary, indent=2))
    if args.report:
        write_report(args.report, summary, outcomes)
    return 0


def _replay(args: argparse.Namespace) -> int:
    if args.publish:
        from diffusion_policy_ros.ros import bag_player

        return bag_player.run(bag_player.PlayOptions(
            bag=args.bag, rate=args.rate, clock=args.clock, clock_hz=args.clock_hz,
            wait_s=args.wait, topics=args.topics, namespace=args.namespace,
            wait_active=args.wait_active, report_topics=args.report_topics))
    from diffusion_policy_ros.learning.episode_bag import BagError
    from diffusion_policy_ros.learning.replay import (
        ReplayError,
        ReplayOptions,
        replay,
        summary_text,
    )

    options = ReplayOptions(bag=args.bag, checkpoint=args.checkpoint, report_dir=args.report,
                            force=args.force, device=args.device,
                            num_inference_steps=args.steps, seed=args.seed,
                            period_s=args.period, gripper_open_m=args.gripper_open,
                            progress=True)
    try:
        result = replay(options)
    except (BagError, ReplayError, FileExistsError) as exc:
        print(f"dpr replay: {exc}", file=sys.stderr)
        return 2
    print(summary_text(result.report))
    print(f"report: {result.report_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    collect = sub.add_parser("collect", help="scripted-expert demonstrations in simulation, "
                             "one rosbag2 (MCAP) per episode")
    collect.add_argument("--episodes", type=int, required=True)
    collect.add_argument("--out", required=True, help="directory for the episode bags")
    collect.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    collect.add_argument("--raw-camera", action="store_true",
                         help="also record the Kinect topics behind each observation")
    collect.add_argument("--pushes", action="store_true",
                         help="push the arm at random during the approach (DART-style "
                         "recoveries, sim/pushes.py)")
    collect.add_argument("--switches", action="store_true",
                         help="start every episode with an instruction for another object "
                         "and switch to its own during the approach (the expert turns)")
    collect.add_argument("--recover-from", metavar="CHECKPOINT",
                         help="DAgger-style: this policy drives first (unrecorded) until a "
                         "random instant or until it starts closing the gripper, then the "
                         "expert takes over and only its corrections are recorded")
    collect.add_argument("--config", help="sim params file (default config/sim.yaml)")
    collect.set_defaults(func=_collect)

    train = sub.add_parser("train", help="train the diffusion policy from episode bags "
                           "(run under torchrun for data parallel)")
    train.add_argument("--data", required=True, nargs="+",
                       help="directory (or directories) of episode_* bags")
    train.add_argument("--config", required=True, help="policy config, e.g. "
                       "config/policy_unet.yaml")
    train.add_argument("--out", required=True, help="run directory (log, checkpoint)")
    train.add_argument("--train-config", help="optimisation settings (config/train.yaml)")
    train.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="replace a policy config field (repeatable), e.g. "
                       "--set tool_relative_target=false")
    train.add_argument("--steps", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--max-minutes", type=float)
    train.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    train.add_argument("--resume", action="store_true", help="continue the run in --out")
    train.set_defaults(func=_train)

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
    distill.add_argument("--init-student", metavar="CHECKPOINT",
                         help="continue from an earlier student of the same teacher")
    distill.add_argument("--sampling-steps", type=int,
                         help="the student's default consistency steps (1, 2, 4)")
    distill.add_argument("--max-minutes", type=float)
    distill.add_argument("--threads", type=int, help="torch intra-op threads")
    distill.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    distill.set_defaults(func=_distill)

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
    prune.set_defaults(func=_prune)

    tune = sub.add_parser("finetune", help="PPO fine-tuning of a policy in simulation "
                          "(vectorised envs; torchrun for several processes or machines)")
    tune.add_argument("--init", default=str(SHIPPED_CHECKPOINT),
                      help="checkpoint to start from (default: the shipped policy)")
    tune.add_argument("--out", required=True, help="run directory (checkpoint/, log.jsonl, "
                      "tb/, learning_curve.png, training_state.*)")
    tune.add_argument("--finetune-config", help="settings YAML (default config/finetune.yaml)")
    tune.add_argument("--iterations", type=int)
    tune.add_argument("--num-envs", type=int, help="simulations per process")
    tune.add_argument("--steps-per-env", type=int, help="control steps per env and iteration")
    tune.add_argument("--depth-noise", action="store_true", help="train with the Kinect's "
                      "time-of-flight depth noise")
    tune.add_argument("--switch-probability", type=float, help="share of episodes with an "
                      "instruction switch after 1 s")
    tune.add_argument("--max-minutes", type=float)
    tune.add_argument("--threads", type=int, help="torch intra-op threads of the learner")
    tune.add_argument("--device", choices=["auto", "cpu", "cuda", "npu"])
    tune.add_argument("--resume", action="store_true", help="continue the run in --out from "
                      "its last checkpoint, exactly")
    tune.set_defaults(func=_finetune)

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
    export.set_defaults(func=_export)

    evaluation = sub.add_parser("eval", help="closed-loop policy evaluation in simulation")
    evaluation.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT),
                            help="policy checkpoint directory (default checkpoints/grasp_unet_cd "
                            "in the repository)")
    evaluation.add_argument("--episodes", type=int, default=100)
    evaluation.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    evaluation.add_argument("--instructions", choices=["task", "wrong", "switch"],
                            default="task", help="wrong: the instruction for another object; "
                            "switch: that one first, the episode's own after 1 s")
    evaluation.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "npu"])
    evaluation.add_argument("--steps", type=int, help="DDIM steps (default: the checkpoint's)")
    evaluation.add_argument("--samples", type=int, help="chunks sampled per observation, "
                            "medoid executed (default: the checkpoint's num_samples)")
    evaluation.add_argument("--report", help="write the per-episode JSON report here")
    evaluation.add_argument("--out", help="write per-episode GIF (camera view + predicted "
                            "end-effector path) and PNG plot (references vs measured joints, "
                            "chunk latency) into this directory")
    evaluation.add_argument("--backend", choices=["torch", "onnxruntime"], default="torch",
                            help="runtime (onnxruntime: the graphs dpr export wrote into "
                            "CHECKPOINT/onnx)")
    evaluation.add_argument("--depth-noise", action="store_true", help="turn on the simulated "
                            "Kinect's time-of-flight depth noise and dropouts (robustness)")
    evaluation.add_argument("--noise", choices=("stream", "fixed", "fresh"), default="stream",
                            help="initial noise of the chunks: stream = new noise per chunk "
                            "from a generator seeded per episode (reproducible); fixed = the "
                            "same seeded noise for every chunk (the earlier default); fresh "
                            "= unseeded")
    evaluation.add_argument("--ros", action="store_true", help="run the episodes through the "
                            "real nodes over ROS (dpr bringup --episodes) instead of in "
                            "process: real latency, real time")
    evaluation.set_defaults(func=_eval)

    rep = sub.add_parser("replay", help="run perception + policy offline over a recorded "
                         "rosbag2 and score it against the recorded actions (report.json + "
                         "plots)")
    rep.add_argument("--bag", required=True, help="rosbag2 directory (sqlite3 or MCAP) from dpr "
                     "collect or ros2 bag record (raw Kinect topics + joint_states + "
                     "instruction)")
    rep.add_argument("--checkpoint", help="policy checkpoint directory (default "
                     "checkpoints/grasp_unet_cd in the repository)")
    rep.add_argument("--report", help="report directory (default <bag>_replay)")
    rep.add_argument("--force", action="store_true", help="overwrite an existing report")
    rep.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "npu"])
    rep.add_argument("--steps", type=int, help="DDIM steps (default: the checkpoint's)")
    rep.add_argument("--seed", type=int, default=0, help="noise seed of the first chunk")
    rep.add_argument("--period", type=float, help="seconds between policy queries (default: "
                     "the checkpoint's action_dt_s; 0: every observation)")
    rep.add_argument("--gripper-open", type=float, default=0.04,
                     help="opening (m) above which the gripper counts as open")
    rep.add_argument("--publish", action="store_true", help="instead of a report: play the "
                     "bag into ROS topics as raw CDR with /clock from the bag time (as ros2 bag "
                     "play), for nodes run with use_sim_time")
    rep.add_argument("--rate", type=float, default=1.0, help="--publish: playback speed factor")
    rep.add_argument("--clock", action=argparse.BooleanOptionalAction, default=True,
                     help="--publish: publish /clock from the bag time (default on)")
    rep.add_argument("--clock-hz", type=float, default=100.0,
                     help="--publish: /clock rate between messages (0: only with messages)")
    rep.add_argument("--wait", type=float, default=2.0, help="--publish: seconds to wait for a "
                     "subscriber on every topic before playing")
    rep.add_argument("--topics", nargs="+", help="--publish: play only these topics")
    rep.add_argument("--namespace", default="", help="--publish: namespace for relative topic "
                     "names")
    rep.add_argument("--wait-active", nargs="+", default=[], metavar="NODE",
                     help="--publish: also wait (up to --wait s) until these lifecycle nodes "
                     "are active, e.g. policy_node")
    rep.add_argument("--report-topics", nargs="+", default=[], metavar="TOPIC",
                     help="--publish: count the messages on these topics while playing and "
                     "report them, e.g. policy/action_chunk")
    rep.set_defaults(func=_replay)

    probe = sub.add_parser("probe", help="held-out first-frame decisions of a checkpoint: "
                           "chunk error and grasp-head error vs the no-grounding bar",
                           add_help=False)
    probe.set_defaults(func=lambda args: _run_main(
        "diffusion_policy_ros.learning.grounding_probe", args.passthrough), passthrough=[])

    expert = sub.add_parser("eval-expert", help="scripted expert success rate and speed",
                            add_help=False)
    expert.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.sim.expert_eval",
                                                    args.passthrough), passthrough=[])

    bench = sub.add_parser("bench", help="benchmarks that print their figures")
    bench_sub = bench.add_subparsers(dest="target", required=True)
    perception = bench_sub.add_parser("perception", help="RGB-D pipeline vs open3d per frame")
    perception.add_argument("--frames", type=int, default=100, help="frames timed per row")
    perception.add_argument("--json", help="also write the rows to this JSON file")
    perception.set_defaults(func=_bench_perception)

    tracker = bench_sub.add_parser("tracker", help="pd_tracker_node loop timing at 500 Hz and "
                                   "1 kHz, with and without a policy-sized CPU load")
    tracker.add_argument("--seconds", type=float, default=10.0, help="per configuration")
    tracker.add_argument("--priorities", type=int, nargs="+", default=[0, 50],
                         help="realtime_priority values to compare (0 = normal scheduling)")
    tracker.set_defaults(func=_bench_tracker)

    blending = bench_sub.add_parser("blending", help="chunk blending strategies on a seeded "
                                    "latency-jittered stream: tracking error and jerk")
    blending.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.control.blending"))
    policy = bench_sub.add_parser("policy", help="per-stage policy latency (U-Net and DiT, "
                                  "DDIM 100 and 10); options as python -m "
                                  "diffusion_policy_ros.policy.benchmark", add_help=False)
    policy.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.policy.benchmark",
                                                    args.passthrough), passthrough=[])
    lightdp = bench_sub.add_parser("lightdp", help="real-time candidates in one table: "
                                   "chunk latency (1 and 2 threads, interleaved), speed-up "
                                   "over the reference, eval figures (config/bench_lightdp.yaml)",
                                   add_help=False)
    lightdp.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.policy.bench_lightdp",
                                                     args.passthrough), passthrough=[])
    tracking = bench_sub.add_parser("tracking", help="tracker on the simulated arm, expert "
                                    "chunks 50-150 ms late: success, error, jerk per blend "
                                    "strategy (--episodes N)", add_help=False)
    tracking.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.sim.tracking_eval",
                                                      args.passthrough), passthrough=[])
    gae = bench_sub.add_parser("gae", help="GAE over a whole rollout at once vs the Python "
                               "loop (median ms, speed-up, max difference)", add_help=False)
    gae.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.learning.bench_gae",
                                                 args.passthrough), passthrough=[])
    rollouts = bench_sub.add_parser("rollouts", help="dpr finetune's rollout throughput "
                                    "(env steps/s) for N envs (--envs 1 2)", add_help=False)
    rollouts.set_defaults(func=lambda args: _run_main(
        "diffusion_policy_ros.learning.bench_rollouts", args.passthrough), passthrough=[])
    tick = bench_sub.add_parser("tick", help="PdTracker tick and submit_chunk time (no ROS)")
    tick.set_defaults(func=lambda args: _run_main("diffusion_policy_ros.control.benchmark"))

    up = sub.add_parser("bringup", help="the whole node graph of launch/grasp.launch.py, one "
                        "process per node, for machines without launch; --episodes N runs and "
                        "scores N simulated episodes")
    up.add_argument("--sim", action=argparse.BooleanOptionalAction, default=True,
                    help="start sim_node (default); --no-sim: camera and arm topics come from "
                    "the real drivers")
    up.add_argument("--episodes", type=int, help="run N episodes (reset, wait for the end), "
                    "print success / wrong-object rates, chunk latency and tracker jitter, "
                    "then stop; default: run until Ctrl-C / SIGTERM")
    up.add_argument("--instruction", help="publish this instruction (latched) instead of the "
                    "sim's, at start-up and after each reset")
    up.add_argument("--switch-after", type=float, metavar="S",
                    help="with --episodes: start each episode with another object's "
                    "instruction and publish the episode's own after S s of sim time")
    up.add_argument("--checkpoint", help="policy checkpoint directory (default "
                    "checkpoints/grasp_unet_cd in the repository)")
    up.add_argument("--seed", type=int, help="seed of the first measured episode (>= 1; "
                    "default: sim.yaml's seed + 1)")
    up.add_argument("--out", help="write bringup_summary.json and the node logs (logs/) here")
    up.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "npu"],
                    help="policy device (default auto, as grasp.launch.py)")
    up.add_argument("--num-inference-steps", type=int, default=0,
                    help="denoiser calls per chunk (DDIM steps, or consistency steps; default "
                    "0 = the checkpoint's, as grasp.launch.py)")
    up.add_argument("--namespace", default="", help="put every node (and this process's "
                    "topics) into this namespace, as grasp.launch.py namespace:=")
    up.add_argument("--use-sim-time", action="store_true", help="sim_node publishes /clock "
                    "and every node runs on it, as grasp.launch.py use_sim_time:=true")
    up.add_argument("--rviz", action="store_true", help="also start robot_state_publisher "
                    "(the package's URDF) and rviz2 with config/grasp.rviz (needs a ROS 2 "
                    "install with rviz2)")
    up.add_argument("--ready-timeout", type=float, default=180.0,
                    help="seconds to wait for the nodes and the first action chunk")
    for flag, node in (("sim", "sim_node"), ("sync", "rgbd_sync_node"),
                       ("policy", "policy_node"), ("tracker", "pd_tracker_node")):
        up.add_argument(f"--{flag}-param", action="append", default=[], metavar="KEY:=VALUE",
                        help=f"{node} parameter override, as ros2 run -p (repeatable)")
    up.set_defaults(func=_bringup)

    demo = sub.add_parser("sync-demo", help="rgbd_sync_node on a synthetic 30 Hz Kinect stream "
                          "over ROS 2, printing rates, latency and point accuracy")
    demo.add_argument("--seconds", type=float, default=10.0)
    demo.add_argument("--resolution", choices=["1280x720", "640x576"], default="1280x720")
    demo.set_defaults(func=_sync_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "passthrough", None) is not None:
        args.passthrough = extra  # options of a module's own main(), e.g. --episodes
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
