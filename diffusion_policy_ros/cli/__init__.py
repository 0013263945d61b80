"""dpr: the offline command line of diffusion_policy_ros.

One module per command, each with ``add_parser(sub)`` and ``run(args) -> exit code``;
``main`` dispatches and reports errors the same way for every command: input a user
can fix (``errors.InputError``, a ``ValueError`` such as a bad setting, a missing or
already used path) is one line ``dpr <command>: <reason>`` and exit 2; a run stopped
with its reason (``errors.RunStopped``) is one line and exit 3.
"""

from __future__ import annotations

import argparse
import sys

from diffusion_policy_ros.cli import (
    bench,
    bringup,
    collect,
    distill,
    evaluate,
    export,
    finetune,
    passthrough,
    prune,
    replay,
    sync_demo,
    table_floor,
    train,
)
from diffusion_policy_ros.errors import InputError, RunStopped

COMMANDS = (collect, train, distill, prune, finetune, export, evaluate, replay, passthrough,
            bench, bringup, sync_demo, table_floor)
INPUT_ERRORS = (InputError, ValueError, FileExistsError, FileNotFoundError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "passthrough", None) is not None:
        args.passthrough = extra  # options of a module's own main(), e.g. --episodes
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except INPUT_ERRORS as exc:
        print(f"dpr {args.command}: {exc}", file=sys.stderr)
        return 2
    except RunStopped as exc:
        print(f"dpr {args.command}: {exc}", file=sys.stderr)
        return 3
