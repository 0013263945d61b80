"""Subcommands that hand their options to a module's own ``main(argv)``."""

from __future__ import annotations

import importlib


def run_module(module: str, argv: list[str] | None = None) -> int:
    """Run ``module.main(argv)`` (the module parses and prints itself)."""
    main = importlib.import_module(module).main
    if argv is None:
        main()
    else:
        main(argv)
    return 0


def add_parser(sub) -> None:
    probe = sub.add_parser("probe", help="held-out first-frame decisions of a checkpoint: "
                           "chunk error and grasp-head error vs the no-grounding bar",
                           add_help=False)
    probe.set_defaults(func=lambda args: run_module(
        "diffusion_policy_ros.learning.grounding_probe", args.passthrough), passthrough=[])

    expert = sub.add_parser("eval-expert", help="scripted expert success rate and speed",
                            add_help=False)
    expert.set_defaults(func=lambda args: run_module("diffusion_policy_ros.sim.expert_eval",
                                                    args.passthrough), passthrough=[])
