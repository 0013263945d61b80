"""The dpr command parses every subcommand it documents."""

import pytest

from diffusion_policy_ros.cli import build_parser


@pytest.mark.parametrize("argv", [["bench", "perception", "--frames", "3"], ["bench", "tracker"],
                                  ["bench", "blending"], ["bench", "tick"],
                                  ["sync-demo", "--seconds", "1"]])
def test_subcommands_parse(argv):
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def test_unknown_subcommand_exits_with_usage():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fly"])
