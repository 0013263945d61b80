"""``dpr eval``: closed-loop evaluation in simulation, in process or through the nodes."""

from __future__ import annotations

import argparse
import json

from diffusion_policy_ros.acting.grasp_rules import GraspRulesConfig, load_grasp_rules
from diffusion_policy_ros.config import SHIPPED_CHECKPOINT, load_node_params


def add_parser(sub) -> None:
    evaluation = sub.add_parser("eval", help="closed-loop policy evaluation in simulation")
    evaluation.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT),
                            help="policy checkpoint directory (default checkpoints/grasp_unet_cd32 "
                            "in the repository)")
    evaluation.add_argument("--episodes", type=int, default=100)
    evaluation.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    evaluation.add_argument("--instructions", default="task",
                            choices=["task", "wrong", "switch", "held_out", "description"],
                            help="wrong: the instruction for another object; "
                            "switch: that one first, the episode's own after 1 s; held_out: "
                            "sentence patterns and words no training sentence uses; "
                            "description: an object named by shape, size and place, not its "
                            "colour")
    evaluation.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "npu"])
    evaluation.add_argument("--steps", type=int, help="DDIM steps (default: the checkpoint's)")
    evaluation.add_argument("--samples", type=int, help="chunks sampled per observation, "
                            "medoid executed (default: the checkpoint's num_samples)")
    evaluation.add_argument("--report", help="write the per-episode JSON report here")
    evaluation.add_argument("--out", help="write per-episode GIF (camera view + predicted "
                            "end-effector path) and PNG plot (references vs measured joints, "
                            "chunk latency) into this directory")
    evaluation.add_argument("--backend", choices=["torch", "onnxruntime", "aotinductor"],
                            default="torch", help="runtime (onnxruntime / aotinductor: the "
                            "graphs dpr export [--format aotinductor] wrote into "
                            "CHECKPOINT/onnx or CHECKPOINT/aot)")
    evaluation.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32",
                            help="autocast precision of the torch backend (as policy_node's "
                            "precision parameter)")
    evaluation.add_argument("--depth-noise", action="store_true", help="turn on the simulated "
                            "Kinect's time-of-flight depth noise and dropouts (robustness)")
    evaluation.add_argument("--resolution", type=int, nargs=2, metavar=("WIDTH", "HEIGHT"),
                            help="the simulated camera's image size in px (default: "
                            "config/sim.yaml's resolution)")
    evaluation.add_argument("--object-set", choices=["five", "varied"],
                            help="the scene's objects (default: config/sim.yaml's "
                            "object_set): varied puts a few of thirteen on the table")
    evaluation.add_argument("--noise", choices=("stream", "fixed", "fresh"), default="stream",
                            help="initial noise of the chunks: stream = new noise per chunk "
                            "from a generator seeded per episode (reproducible); fixed = the "
                            "same seeded noise for every chunk (the earlier default); fresh "
                            "= unseeded")
    evaluation.add_argument("--rules", metavar="PARAMS_FILE", help="chunk rules of "
                            "policy_node's parameter file PARAMS_FILE (grasp_retry.*, "
                            "grasp_lift.*), e.g. config/grasp_rules.yaml for the simulated "
                            "grasp task (default: none, as policy_node without one)")
    evaluation.add_argument("--grasp-retry", choices=("on", "off"), help="re-open a gripper "
                            "that closed on nothing (default: as --rules says)")
    evaluation.add_argument("--grasp-lift", choices=("on", "off"), help="lift a grasp that "
                            "stalled wide on the table, a cube held across its corners "
                            "(default: as --rules says)")
    evaluation.add_argument("--ros", action="store_true", help="run the episodes through the "
                            "real nodes over ROS (dpr bringup --episodes) instead of in "
                            "process: real latency, real time")
    evaluation.set_defaults(func=run)


def _eval_over_ros(args: argparse.Namespace) -> int:
    """``dpr eval --ros``: the same seeded episodes through the real nodes (``dpr bringup``)."""
    from diffusion_policy_ros.ros.bringup.options import Options
    from diffusion_policy_ros.ros.bringup.runner import run as run_bringup
    from diffusion_policy_ros.sim.task import SWITCH_AFTER_S

    if args.instructions not in ("task", "switch"):
        raise ValueError(f"--ros scores the sim's own instruction; --instructions "
                         f"{args.instructions} runs in process only")
    if args.noise == "fixed":
        raise ValueError("--ros runs policy_node, which draws new noise for every chunk; "
                         "--noise fixed runs in process only")
    if args.seed < 1:
        raise ValueError("--ros needs --seed >= 1 (sim_node's start-up episode takes "
                         "seed - 1)")
    return run_bringup(Options(
        episodes=args.episodes, seed=args.seed, checkpoint=args.checkpoint,
        switch_after_s=SWITCH_AFTER_S if args.instructions == "switch" else None,
        device=args.device, num_inference_steps=args.steps or 0, out=args.out,
        sim_params=_sim_params(args),
        policy_params=_policy_params(args)))


def _sim_params(args: argparse.Namespace) -> list[str]:
    """``sim_node`` overrides for the options the in-process run also takes."""
    params = ["depth_noise:=true"] if args.depth_noise else []
    if args.resolution:
        params.append(f"resolution:=[{args.resolution[0]},{args.resolution[1]}]")
    if args.object_set:
        params.append(f"object_set:={args.object_set}")
    return params


def _policy_params(args: argparse.Namespace) -> list[str]:
    """``policy_node`` overrides for the options the in-process run also takes."""
    params = [f"backend:={args.backend}", f"precision:={args.precision}"]
    if args.samples:
        params.append(f"num_samples:={args.samples}")
    if args.rules:
        params += [f"{name}:={json.dumps(value)}"
                   for name, value in load_node_params(args.rules, "policy_node").items()]
    if args.grasp_retry:
        params.append(f"grasp_retry.enabled:={str(args.grasp_retry == 'on').lower()}")
    if args.grasp_lift:
        params.append(f"grasp_lift.enabled:={str(args.grasp_lift == 'on').lower()}")
    return params


def _rules(args: argparse.Namespace) -> GraspRulesConfig:
    """The rules file's grasp rules, each switched on or off where an option says so."""
    rules = load_grasp_rules(args.rules) if args.rules else GraspRulesConfig()
    for option, config in ((args.grasp_retry, rules.grasp_retry),
                           (args.grasp_lift, rules.grasp_lift)):
        if option:
            config.enabled = option == "on"
            config.validate()
    return rules


def run(args: argparse.Namespace) -> int:
    if args.ros:
        return _eval_over_ros(args)
    from diffusion_policy_ros.learning.evaluate import evaluate, write_report

    summary, outcomes = evaluate(args.checkpoint, args.episodes, args.seed,
                                 args.instructions, args.device, args.steps,
                                 media_dir=args.out, noise=args.noise,
                                 num_samples=args.samples, depth_noise=args.depth_noise,
                                 resolution=args.resolution, object_set=args.object_set,
                                 backend=args.backend, precision=args.precision,
                                 rules=_rules(args))
    print(json.dumps(summary, indent=2))
    if args.report:
        write_report(args.report, summary, outcomes)
    return 0
