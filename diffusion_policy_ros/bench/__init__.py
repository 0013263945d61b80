"""Benchmarks: every measurement that prints figures, one module each (``dpr bench``).

``bench`` sits above the algorithm packages, like ``cli``: it imports ``control``,
``perception``, ``policy``, ``learning``, ``sim`` and ``ros``, and none of them imports
it (test/bench/test_layering.py checks). Each module runs with
``python -m diffusion_policy_ros.bench.<module>`` as well; the figures measured with
them are in docs/explanation/benchmarks.md.

=====================  ===============================  ==========================================
module                 command                          what it measures
=====================  ===============================  ==========================================
``perception``         ``dpr bench perception``         per-frame cost of the RGB-D observation
                                                        pipeline (sync, decode, back-project,
                                                        crop, voxel, sampling) vs an open3d
                                                        baseline, and how close the points are
``tracker_tick``       ``dpr bench tick``               ``PdTracker.tick`` (500 Hz) and
                                                        ``submit_chunk`` time per blend strategy,
                                                        pure Python, no ROS
``blending``           ``dpr bench blending``           the blend strategies on a seeded synthetic
                                                        chunk stream with 50-150 ms latency:
                                                        tracking error, jerk at chunk switches;
                                                        the rule behind the default
                                                        ``blend_strategy``
``sim_tracking``       ``dpr bench tracking``           the blend strategies in closed loop on the
                                                        simulated arm with late expert chunks:
                                                        success, tracking error, jerk, chunks
                                                        rejected
``tracker_loop``       ``dpr bench tracker``            ``pd_tracker_node`` (its own process, over
                                                        DDS) loop rate, period error and tick time
                                                        at 500 Hz and 1 kHz, under no / policy-
                                                        sized / saturating CPU load, normal vs
                                                        ``SCHED_FIFO`` (starts ROS)
``policy_stages``      ``dpr bench policy``             per-stage policy latency (encoders,
                                                        fusion, one denoiser step, full chunk) for
                                                        the U-Net and DiT configs, DDIM step
                                                        counts and K samples
``lightdp``            ``dpr bench lightdp``            the real-time policy candidates of
                                                        config/bench_lightdp.yaml in one table:
                                                        chunk latency at 1 and 2 threads, speed-up
                                                        over the reference, their ``dpr eval``
                                                        figures
``activations``        ``dpr bench activations``        the policy's Mish written with one exp
                                                        against ``torch.nn.functional.mish``,
                                                        eager and Inductor-compiled: median us,
                                                        speed-up, error to float64
``aot_graphs``         ``dpr bench aot``                how ``dpr export`` compiles its
                                                        AOTInductor packages: the PointNet's
                                                        cell max-pool as scatter_reduce vs masked
                                                        max-pools, each graph with and without
                                                        GEMM autotuning: median ms, speed-up,
                                                        max difference
``gae``                ``dpr bench gae``                GAE over a whole rollout at once vs the
                                                        reverse Python loop: median ms, speed-up,
                                                        max difference
``rollouts``           ``dpr bench rollouts``           ``dpr finetune``'s rollout throughput (env
                                                        steps/s) for N environments
``lift_path``          ``dpr bench lift-path``          the stalled-grasp lift's path solve for
                                                        all points at once vs point by point:
                                                        median ms, speed-up, pose errors
``sim_core``           (``python -m`` only)             MuJoCo camera frame render time per
                                                        resolution, physics steps per second,
                                                        real-time factor
``frozen_subscriber``  ``dpr bench frozen-subscriber``  a ``joint_states`` subscriber process
                                                        frozen (SIGSTOP) and resumed next to
                                                        ``sim_node`` and the tracker: publish
                                                        stalls, tracker faults, with the package's
                                                        Fast DDS profiles vs shared memory (starts
                                                        ROS)
``loaded_startup``     ``dpr bench loaded-startup``     ``sim_node`` started N times next to CPU
                                                        burners with a test-like subscriber:
                                                        exits, refused publishes, when the sim had
                                                        the first command and how late its
                                                        reports arrived (starts ROS)
``json_report``        (a helper)                       the ``--json`` file each benchmark can
                                                        write next to its printed table
=====================  ===============================  ==========================================

Nothing is imported here: each benchmark pulls in only what it measures (torch,
open3d, MuJoCo or rclpy).
"""
