"""dpr bench tracker: one table row per configuration (a missing node said as such); the
CLI offers the loads the bench knows."""

from diffusion_policy_ros.bench.tracker_loop import LOADS, format_table
from diffusion_policy_ros.cli.bench import TRACKER_LOADS


def test_table_has_a_row_per_configuration_and_names_missing_diagnostics():
    diagnostics = {"scheduling": "SCHED_FIFO 50", "loop_rate_hz": "500.0",
                   "period_error_ms_p50": "0.0050", "period_error_ms_p99": "0.2000",
                   "period_error_ms_max": "1.0000", "tick_ms_p50": "0.1300",
                   "tick_ms_p99": "0.2800", "skipped_deadlines": "0"}
    rows = [{"rate_hz": 500.0, "load": "saturated", "realtime_priority": 50,
             "diagnostics": diagnostics},
            {"rate_hz": 1000.0, "load": "none", "realtime_priority": 0, "diagnostics": {}}]
    lines = format_table(rows).splitlines()
    assert len(lines) == 4
    assert lines[2] == ("| 500 Hz | saturated | SCHED_FIFO 50 | 500.0 | 0.005 / 0.200 / 1.000 "
                        "| 0.130 / 0.280 | 0 |")
    assert lines[3].startswith("| 1000 Hz | none | | no diagnostics |")


def test_the_cli_offers_the_loads_the_bench_knows():
    assert TRACKER_LOADS == LOADS
