"""dpr bench frozen-subscriber: one table row per block, in the order measured; the CLI
runs it."""

from diffusion_policy_ros.bench.frozen_subscriber import CONFIGS, format_table
from diffusion_policy_ros.cli import build_parser


def test_table_has_a_row_per_block():
    rows = [{"config": config, "frozen": "policy_node", "cycles": 150, "freeze_s": 0.3,
             "publish_stalls": stalls,
             "tracker_faults": stalls, "freezes_with_states_stopped": stalls,
             "longest_gap_ms": 309.0, "median_gap_ms": 14.1, "sim_cpu_core_s_per_s": 0.886}
            for config, stalls in zip(CONFIGS, (0, 5), strict=True)]
    lines = format_table(rows).splitlines()
    assert len(lines) == 4
    assert lines[2] == ("| package | policy_node | 150 x 0.3 s | 0 | 0 | 0 | 309.0 / 14.1 "
                        "| 0.886 |")
    assert lines[3].startswith("| shm | policy_node | 150 x 0.3 s | 5 | 5 | 5 |")


def test_the_cli_runs_the_bench_module():
    args = build_parser().parse_args(["bench", "frozen-subscriber"])
    assert args.target == "frozen-subscriber"
