"""``dpr bringup``: start the grasp graph as processes, drive it, stop it, report.

Without ``--episodes`` the graph runs until Ctrl-C / SIGTERM, printing a status line
every 10 s. With ``--episodes N`` (simulation only) a ``GraspCommander`` waits until
chunks flow, then runs N episodes (``GraspCommander.run_episode``: reset, the
instruction, the end on ``sim/episode``) and the run prints success and wrong-object
rates, chunk latency, tracker jitter and the CPU each process used per second of
sim time over the episodes (``statistics``; Linux ``/proc``). ``--out DIR`` writes
``DIR/bringup_summary.json``, the node logs to ``DIR/logs/`` and, with
``--episodes``, per episode ``episode_<seed>.gif`` (camera view with the predicted
end-effector path) and ``episode_<seed>.png`` (joint references vs measured, chunk
arrivals and latency; ``ros/episode_recorder.py``). Children are stopped by PID with
SIGTERM (SIGKILL after 10 s) when the run ends or is interrupted (Ctrl-C reaches this
process only: each child has a process group of its own). A dead ``rgbd_sync_node`` or
``policy_node`` is started again (``supervisor``, the rule of ``ros.processes``: at most
``--max-restarts`` in a row, after 1, 2, 4 ... s) while the tracker holds the arm; the
exit of any other node, or of one out of restarts, ends the run with that reason.
The summary counts the restarts per node and every ERROR on ``/diagnostics`` from the
first message on, the start-up WARN states apart.

``--instruction TEXT`` replaces the sim's instruction: this process publishes TEXT
(latched) at start-up and after each reset; the sim scores the object TEXT names
(``no_target``, which never ends an episode, when it names none). Without it the sim
instructs itself; ``--sim-param publish_instruction:=false`` makes it wait for a
person's instruction instead, as ``grasp.launch.py`` does by default.

``--switch-after S`` (with ``--episodes``) changes the instruction mid-episode
through the nodes, as ``dpr eval --instructions switch`` does in process: another
object (the one ``dpr eval`` picks for the seed) first, the episode's own (the
seed's task, ``sim.runtime.seed_task``) S seconds of sim time later. Success means
the policy dropped the first target for the new one; lifting the first-named object
after the switch is a wrong object.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from diffusion_policy_ros.monitoring import cpu_per_sim_second, process_cpu_s
from diffusion_policy_ros.ros.bringup.graph import node_specs
from diffusion_policy_ros.ros.bringup.options import BringupError, Options, validate
from diffusion_policy_ros.ros.bringup.statistics import format_summary, percentiles, summarize
from diffusion_policy_ros.ros.bringup.supervisor import NodeProcesses
from diffusion_policy_ros.ros.dds_profiles import namespace_ros_args, use_package_dds_profiles
from diffusion_policy_ros.ros.processes import RestartPolicy

STATUS_PERIOD_S = 10.0


def _wait_ready(commander, nodes: list[str], timeout_s: float, required: bool) -> None:
    """Not ``required`` (run until a signal): a timeout is reported and the graph keeps
    running (the drivers of a real robot may come up later); a failed configure ends it."""
    from diffusion_policy_ros.ros.bringup.commander import CommanderStopped

    print("waiting for the nodes (policy: load + warm-up) and the first action chunk ...",
          flush=True)
    t0 = time.monotonic()
    if not commander.wait_until_ready(nodes, timeout_s):
        problem = f"not ready after {timeout_s:.0f} s: {commander.not_ready_reason(nodes)}"
        if required:
            raise CommanderStopped(problem)
        print(f"warning: {problem}; still running", flush=True)
        return
    print(f"ready after {time.monotonic() - t0:.1f} s: chunks flowing", flush=True)


def _resume_sim_once_the_policy_is_active(commander, timeout_s: float,
                                          required: bool) -> None:
    """sim_node starts paused on sim time (``node_specs``): resumed once policy_node is
    active. Not ``required``: a policy still loading after ``timeout_s`` is reported and
    the simulation resumed anyway."""
    from diffusion_policy_ros.ros.bringup.commander import CommanderStopped

    print("simulation paused while policy_node loads and warms up ...", flush=True)
    if not commander.wait_until_policy_active(timeout_s):
        problem = (f"policy_node not active after {timeout_s:.0f} s: "
                   f"{commander.not_ready_reason(['policy_node'])}")
        if required:
            raise CommanderStopped(problem)
        print(f"warning: {problem}; resuming the simulation anyway", flush=True)
    commander.set_sim_paused(False)


def _cpu_snapshot(processes, commander) -> tuple[dict[str, float | None], float]:
    """CPU seconds used so far by each node process and by this one (the commander and
    the episode recorder), and the time on this node's clock (sim time with
    ``--use-sim-time``)."""
    cpu = {**{name: process_cpu_s(pid) for name, pid in processes.pids().items()},
           "dpr_bringup": time.process_time()}
    return cpu, commander.node.get_clock().now().nanoseconds * 1e-9


def _run_episodes(commander, opts: Options, records: list[dict], processes,
                  cpu: dict) -> None:
    """Run the episodes; ``cpu`` gets the graph's CPU per sim second over them (resets and
    the recorder's writing included)."""
    wall_limit_s = commander.episode_wall_limit_s()
    cpu_before, clock_before_s = _cpu_snapshot(processes, commander)
    pids_before = processes.pids()
    assert opts.episodes is not None  # run only with --episodes
    for index in range(opts.episodes):
        record = {"index": index, **commander.run_episode(
            opts.instruction, opts.switch_after_s, wall_limit_s,
            Path(opts.out) if opts.out else None)}
        records.append(record)
        first = record.get("first_instruction")
        told = f"'{record['instruction']}'" if first is None \
            else f"'{first}', then '{record['instruction']}'"
        print(f"episode {index + 1}/{opts.episodes} (seed {record['seed']}, "
              f"{told} -> {record['target']}): {record['status']} after "
              f"{record['elapsed_s']:.2f} s sim, {record['wall_s']:.1f} s wall, "
              f"{record['chunks']} chunks", flush=True)
    cpu_after, clock_after_s = _cpu_snapshot(processes, commander)
    for name, pid in processes.pids().items():  # a restarted node's CPU is not comparable
        if pids_before.get(name) != pid:
            cpu_after[name] = None
    cpu.update(cpu_per_sim_second(cpu_before, cpu_after, clock_after_s - clock_before_s) or {})


def _give_startup_episode_its_instruction(commander, timeout_s: float) -> None:
    """With ``--switch-after`` sim_node publishes no instruction: without this the policy
    would wait for one and no chunk would flow before the first measured episode."""
    from diffusion_policy_ros.ros.bringup.commander import CommanderStopped

    if not commander.spin_until(lambda: bool(commander.episodes), timeout_s):
        raise CommanderStopped(f"no sim/episode report from sim_node within {timeout_s:.0f} s")
    seed = int(commander.episodes[max(commander.episodes)]["seed"])
    commander.instruct(commander.seed_instruction(seed))


def _run_forever(commander, processes) -> None:
    next_status = time.monotonic() + STATUS_PERIOD_S
    while True:
        commander.spin_until(lambda: False, max(0.0, next_status - time.monotonic()))
        next_status += STATUS_PERIOD_S
        recent = [ms for t, ms in commander.chunks if t > time.monotonic() - STATUS_PERIOD_S]
        tracker = commander.diagnostics.get("pd_tracker_node", {})
        current = commander.episodes.get(max(commander.episodes, default=0), {})
        lat = percentiles(recent)
        restarts = {name: n for name, n in processes.restarts().items() if n}
        print(f"[{time.strftime('%H:%M:%S')}] chunks {len(recent) / STATUS_PERIOD_S:.1f}/s, "
              f"latency p50 {lat['p50']} ms; tracker {tracker.get('mode', '?')}, period "
              f"error p99 {tracker.get('period_error_ms_p99', '?')} ms; episode "
              f"{current.get('episode', '-')} {current.get('status', '-')}"
              + ("; restarts " + ", ".join(f"{n} {k}" for n, k in restarts.items())
                 if restarts else ""), flush=True)


def run(opts: Options) -> int:
    """Start the graph, run it (N episodes or until a signal), stop it; the exit status."""
    try:
        checkpoint = validate(opts)
    except BringupError as exc:
        print(f"dpr bringup: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out = Path(opts.out) if opts.out else None
    rviz_dir = None
    if opts.rviz:
        rviz_dir = out if out else Path(tempfile.mkdtemp(prefix="dpr-bringup-"))
        rviz_dir.mkdir(parents=True, exist_ok=True)
    specs = node_specs(opts, checkpoint, rviz_dir)
    processes = NodeProcesses(specs, out / "logs" if out else None,
                              RestartPolicy(max_in_a_row=opts.max_restarts))

    signalled: list[str] = []  # set by the handler, acted on between spins
    previous = {sig: signal.signal(sig, lambda signum, frame: signalled.append(
        signal.Signals(signum).name)) for sig in (signal.SIGINT, signal.SIGTERM)}
    commander = None
    records: list[dict] = []
    cpu: dict[str, float] = {}
    aborted = ""
    started = time.monotonic()
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from diffusion_policy_ros.ros.bringup.commander import CommanderStopped, GraspCommander

    try:
        processes.start()  # before rclpy.init: no threads yet when the children fork
        # args=[]: this process's own argv are dpr options; rcl would read a node
        # override such as backend:=aotinductor among them as a remap rule of its own.
        use_package_dds_profiles(namespace_ros_args(opts.namespace))
        rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
        commander = GraspCommander(
            namespace=opts.namespace, use_sim_time=opts.use_sim_time,
            stop_reason=lambda: signalled[0] if signalled else processes.supervise(),
            record_media=out is not None and opts.episodes is not None, node_name="dpr_bringup",
            latency_stages=opts.latency_stages)
        if opts.instruction is not None:
            commander.instruct(opts.instruction)
        if opts.switch_after_s is not None:
            _give_startup_episode_its_instruction(commander, opts.ready_timeout_s)
        if opts.sim and opts.use_sim_time:
            _resume_sim_once_the_policy_is_active(commander, opts.ready_timeout_s,
                                                  required=opts.episodes is not None)
        _wait_ready(commander, [s.name for s in specs if s.ours], opts.ready_timeout_s,
                    required=opts.episodes is not None)
        if opts.episodes is None:
            print("running; Ctrl-C or SIGTERM stops all nodes", flush=True)
            _run_forever(commander, processes)
        else:
            _run_episodes(commander, opts, records, processes, cpu)
            commander.fresh_diagnostics(["policy_node", "pd_tracker_node"])
    except CommanderStopped as exc:
        aborted = str(exc)
    finally:
        exited_early = processes.exited()
        return_codes = processes.stop()  # a second Ctrl-C meanwhile is recorded, not raised
        snapshot: dict[str, Any] | None = (
            dict(diagnostics=commander.diagnostics, chunks=list(commander.chunks),
                 episode_chunks=list(commander.episode_chunk_latencies_ms),
                 episode_stages=list(commander.episode_latency_stages_ms),
                 stages=commander.stages_ms(range(len(commander.chunks))),
                 tracker_p99=list(commander.tracker_p99), ended=list(commander.ended),
                 errors=dict(commander.errors),
                 startup_warnings=dict(commander.startup_warnings),
                 resets_started_by_report=commander.resets_started_by_report)
            if commander is not None else None)
        if commander is not None:
            commander.close()
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    by_signal = aborted in ("SIGINT", "SIGTERM")
    if aborted and not by_signal:
        print(f"dpr bringup: stopped: {aborted}", file=sys.stderr)
    if snapshot is None:
        return 0 if by_signal and opts.episodes is None else 1
    if opts.episodes is None:  # every episode that ended while the graph ran
        records = [{"episode": r["episode"], "seed": r["seed"], "status": r["status"],
                    "target": r["target"], "instruction": r["instruction"],
                    "wrong_object": r["wrong_object"], "elapsed_s": r["elapsed_s"]}
                   for r in snapshot["ended"]]
    p99s = [p for _, p in snapshot["tracker_p99"]]
    # Measured episodes: their chunks only (the same the per-episode figures use).
    latencies = (snapshot["episode_chunks"] if opts.episodes is not None
                 else [ms for _, ms in snapshot["chunks"]])
    stages = snapshot["episode_stages"] if opts.episodes is not None else snapshot["stages"]
    summary = {
        "episodes_requested": opts.episodes,
        **summarize(records, latencies, snapshot["diagnostics"],
                    round(max(p99s), 4) if p99s else None, stages),
        "cpu_core_s_per_sim_s": cpu or None,
        "episodes": records,
        "aborted": aborted or None,
        "resets_started_by_report": snapshot["resets_started_by_report"],
        "wall_s": round(time.monotonic() - started, 1),
        "checkpoint": checkpoint,
        "instruction_override": opts.instruction,
        "sim": opts.sim,
        "restarts": processes.restarts(),
        "processes": {spec.name: {"pid": processes.pids()[spec.name], "module": spec.module,
                                  "args": spec.ros_args,
                                  "exit_status": return_codes.get(spec.name),
                                  "exited_early": spec.name in exited_early,
                                  "restarts": processes.restarts().get(spec.name, 0),
                                  "exits": processes.exits[spec.name]}
                      for spec in specs},
        "diagnostics_errors": snapshot["errors"],
        "diagnostics_startup_warnings": snapshot["startup_warnings"],
        "diagnostics": snapshot["diagnostics"],
    }
    print(format_summary(summary), flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "bringup_summary.json"
        path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        print(f"summary: {path}", flush=True)
    if opts.episodes is None:
        return 0 if by_signal else 1
    return 0 if not aborted and len(records) == opts.episodes else 1
