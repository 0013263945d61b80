"""A bring-up run's figures from episode records and diagnostics."""

from diffusion_policy_ros.ros.bringup.statistics import format_summary, summarize


def test_summary_figures():
    outcomes = [{"status": s} for s in ("success", "wrong_object", "timeout", "success")]
    diagnostics = {"policy_node": {"predict_ms_p50": "12.5", "predict_ms_p99": "nan",
                                   "chunk_rate_hz": "9.90", "chunks_total": "40",
                                   "overrun_ticks": "1", "grasp_retries_total": "2"},
                   "pd_tracker_node": {"period_error_ms_p50": "0.0100",
                                       "period_error_ms_p99": "0.2000",
                                       "period_error_ms_max": "1.5", "loop_rate_hz": "499.9"}}
    s = summarize(outcomes, [10.0, 20.0, float("nan"), 30.0], diagnostics, 0.3)
    assert s["success_rate"] == 0.5 and s["wrong_object_rate"] == 0.25
    assert s["timeout_rate"] == 0.25 and s["episodes_completed"] == 4
    assert s["chunk_latency_ms"]["count"] == 3 and s["chunk_latency_ms"]["p50"] == 20.0
    assert s["policy_predict_ms"] == {"p50": 12.5, "p99": None}
    assert s["tracker_period_error_ms"]["p99"] == 0.2
    assert s["tracker_period_error_ms"]["p99_worst"] == 0.3
    assert s["policy_grasp_retries"] == 2 and "grasp retries 2" in format_summary(s)
    empty = summarize([], [], {}, None)
    assert empty["success_rate"] is None and empty["chunk_latency_ms"]["p50"] is None
    assert "n/a" in format_summary({**empty, "episodes_requested": 1})
    assert "grasp retries n/a" in format_summary(empty)
    assert "ERROR on /diagnostics from start-up on: none" in format_summary(empty)
    assert "by hop" not in format_summary(empty)  # no stages measured: no line


def test_the_latency_by_hop():
    stages = [{"frame": 9.0, "sync": 7.0, "policy": 12.0, "delivery": 1.0},
              {"frame": 11.0, "sync": float("nan"), "policy": float("nan"), "delivery": 0.5}]
    s = summarize([], [29.0, 30.0], {}, None, stages)
    by_hop = s["chunk_latency_stages_ms"]
    assert list(by_hop) == ["frame", "sync", "policy", "delivery"]
    assert by_hop["frame"]["p50"] == 10.0 and by_hop["frame"]["count"] == 2
    assert by_hop["sync"]["count"] == 1 and by_hop["sync"]["p50"] == 7.0
    assert "by hop, p50 (ms): frame 10.0, sync 7.0, policy 12.0, delivery 0.8" in \
        format_summary(s)


def test_the_real_time_factor_is_the_episodes_sim_over_wall_time():
    diagnostics = {"sim_node": {"real_time_factor": "0.34"}}  # a window after the last episode
    outcomes = [{"status": "success", "elapsed_s": 6.0, "wall_s": 10.0},
                {"status": "success", "elapsed_s": 4.0, "wall_s": 6.0}]
    s = summarize(outcomes, [], diagnostics, None)
    assert s["sim_real_time_factor"] == 0.625
    assert s["sim_real_time_factor_last_window"] == 0.34
    assert summarize([{"status": "success"}], [], diagnostics, None)[
        "sim_real_time_factor"] == 0.34  # no wall times (the graph ran without --episodes)


def test_the_chunk_rate_counts_the_episodes_chunks_by_stamp_over_their_sim_time():
    diagnostics = {"policy_node": {"chunk_rate_hz": "13.5"}}  # a window across a reset
    outcomes = [{"status": "success", "elapsed_s": 6.0, "chunks_in_span": 60},
                {"status": "timeout", "elapsed_s": 20.0, "chunks_in_span": 198}]
    s = summarize(outcomes, [], diagnostics, None)
    assert s["policy_chunk_rate_hz"] == round(258 / 26.0, 3)
    assert s["policy_chunk_rate_hz_last_window"] == 13.5
    assert "9.9 /s at the policy, stamped in the episodes, per sim second" in format_summary(s)
    # on the wall clock the episodes carry no counts: the diagnostics window stands in
    s = summarize([{"status": "success", "elapsed_s": 6.0}], [], diagnostics, None)
    assert s["policy_chunk_rate_hz"] == 13.5
    assert "13.5 /s at the policy, its last diagnostics window" in format_summary(s)


def test_the_cpu_line_names_each_process_per_sim_second():
    summary = {**summarize([], [], {}, None),
               "cpu_core_s_per_sim_s": {"sim_node": 1.18, "policy_node": 0.41, "total": 1.59}}
    assert ("CPU over the episodes, core-seconds per sim second: sim_node 1.18, "
            "policy_node 0.41, total 1.59") in format_summary(summary)
    assert "CPU over" not in format_summary({**summary, "cpu_core_s_per_sim_s": None})


def test_errors_count_from_start_up_on_and_start_up_warnings_are_told_apart():
    summary = {**summarize([], [], {}, None), "diagnostics_errors": {
        "pd_tracker_node": {"count": 3, "before_ready": 2,
                            "messages": ["fault: joint_states stale"]},
        "policy_node": {"count": 1, "before_ready": 0, "messages": ["stale observation"]}},
        "diagnostics_startup_warnings": {"pd_tracker_node": {
            "count": 4, "messages": ["waiting for joint_states"]}}}
    text = format_summary(summary)
    assert ("ERROR on /diagnostics from start-up on: pd_tracker_node x3 (2 before the graph "
            "was ready): fault: joint_states stale; policy_node x1: stale observation") in text
    assert ("start-up states (WARN on /diagnostics before the graph was ready, expected): "
            "pd_tracker_node x4: waiting for joint_states") in text
    assert "start-up states" not in format_summary(summarize([], [], {}, None))


def test_the_restarts_line_names_each_node_and_how_it_exited():
    summary = {**summarize([], [], {}, None), "restarts": {"rgbd_sync_node": 1, "policy_node": 0},
               "processes": {"rgbd_sync_node": {"exits": ["signal SIGKILL after 40.2 s"]},
                             "policy_node": {"exits": []}}}
    assert "node restarts: rgbd_sync_node x1 (exited: signal SIGKILL after 40.2 s)" \
        in format_summary(summary)
    assert "node restarts" not in format_summary({**summary, "restarts": {"policy_node": 0}})
