"""``dpr bringup``: the grasp graph without ``launch``, and a commander that drives any graph.

Modules, from the bottom up:

- ``options``: ``Options`` (what ``dpr bringup`` was asked for), their checks
  (``validate``, ``BringupError``: exit status 2).
- ``graph``: ``NodeSpec`` and ``node_specs``: the nodes ``launch/grasp.launch.py``
  starts, with the same parameter files and launch-argument defaults, as commands.
- ``supervisor``: ``NodeProcesses``: one process per node, a dead ``rgbd_sync_node`` or
  ``policy_node`` started again (the rule of ``ros.processes``), all stopped by PID.
- ``statistics``: rates and figures of a run (``summarize``, ``format_summary``).
- ``commander``: ``GraspCommander``, the public Python API to a running graph
  (whoever started it: ``dpr bringup``, ``ros2 launch`` or a real robot's bring-up):
  wait until chunks flow, reset an episode, give an instruction, wait for the
  episode's end, read chunk latencies and ``/diagnostics``. No rclpy in user code.
- ``runner``: ``run``: ``dpr bringup`` itself (start the processes, drive N episodes
  with a ``GraspCommander`` or run until a signal, stop, report).

Only ``commander`` and ``runner`` import rclpy.
"""
