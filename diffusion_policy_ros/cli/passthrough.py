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


def add_module_command(sub, name: str, help_text: str, module: str) -> None:
    """Subcommand ``name`` whose options all go to ``module.main(argv)``."""
    parser = sub.add_parser(name, help=help_text, add_help=False)
    parser.set_defaults(func=lambda args: run_module(module, args.passthrough),
                        passthrough=[])


def add_parser(sub) -> None:
    add_module_command(sub, "probe", "held-out first-frame decisions of a checkpoint: chunk "
                       "error and grasp-head error vs the no-grounding bar",
                       "diffusion_policy_ros.learning.grounding_probe")
    add_module_command(sub, "eval-expert", "scripted expert success rate and speed",
                       "diffusion_policy_ros.sim.expert_eval")
