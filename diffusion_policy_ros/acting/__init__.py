"""The acting loop every caller of a policy shares, without ROS and without torch.

- ``agent``: ``PolicyAgent``: observation history, instruction and task restart, the
  chunks' noise stream and the chunk rules; ``policy_node``, ``dpr eval`` and the RL
  rollouts act through it.
- ``observation_history``: stamp-paired frames and joint states, the To-frame selection.
- ``rules``: the ``ChunkRule`` protocol and ``ChunkRules``, rules applied in order.
- ``grasp_retry``, ``grasp_lift``: the grasp task's rules; ``grasp_rules`` builds them
  from their parameters (config/grasp_rules.yaml), off unless a file turns them on.
"""
