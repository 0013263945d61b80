"""dpr bench loaded-startup: the cycles summed up in one table row; the CLI runs it."""

from diffusion_policy_ros.bench.loaded_startup import format_table, summarize
from diffusion_policy_ros.cli import build_parser


def _row(exited=False, refused=0, had=0.2, late=0.01):
    return {"cycle": 1, "exited": exited, "publish_refused": refused,
            "sim_had_command_s": had, "report_received_s": had, "report_late_max_s": late}


def test_summary_counts_exits_refusals_and_late_reports():
    rows = [_row(), _row(refused=2, had=0.5, late=2.4), _row(exited=True, had=None, late=None)]
    summary = summarize(rows)
    assert summary == {"cycles": 3, "exited": 1, "cycles_with_refused": 1,
                       "no_command_reported": 1, "sim_had_command_s_median": 0.35,
                       "sim_had_command_s_max": 0.5, "cycles_with_a_late_report": 1,
                       "report_late_max_s": 2.4}
    lines = format_table(summary, burners=4).splitlines()
    assert len(lines) == 3 and lines[2] == "| 4 | 3 | 1 | 1 | 0.35 / 0.5 | 1 | 1 | 2.4 |"


def test_the_cli_runs_the_bench_module():
    args = build_parser().parse_args(["bench", "loaded-startup"])
    assert args.target == "loaded-startup"
