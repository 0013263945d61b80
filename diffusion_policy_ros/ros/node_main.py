"""The ``main()`` every node executable shares: init, spin, clean shutdown on SIGINT/SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import uninstall_signal_handlers

from diffusion_policy_ros.config import ConfigError
from diffusion_policy_ros.ros.dds_profiles import use_package_dds_profiles

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: How often the spin looks for a stop signal (Python runs signal handlers only between
#: the executor's waits).
SIGNAL_POLL_S = 0.1


def run_node(factory: Callable[[], Node], name: str, args=None) -> None:
    """Spin ``factory()`` until shutdown; invalid parameters exit with status 2.

    SIGINT and SIGTERM end the node with status 0 and no traceback, however many come:
    a terminal's Ctrl-C reaches every process of its group and ``ros2 launch`` then sends
    each node a SIGINT of its own, which lands while the node is shutting down (a
    KeyboardInterrupt there left threads running, the process killed by the signal and
    torch's exit handlers interrupted). The handlers set here only take note, and the
    spin ends within ``SIGNAL_POLL_S``. rclpy's own handlers are taken out again: they
    shut the context down at once, under the node's threads that still publish; here
    the node (and its threads) go first, then the context. Once a signal came the
    handlers stay, so a late one cannot interrupt the exit, and the process ends without
    the interpreter's teardown (``_exit_stopped``).
    """
    use_package_dds_profiles(args)
    rclpy.init(args=args)
    uninstall_signal_handlers()
    stopping: list[int] = []

    def take_note(signum, frame) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, take_note) for sig in STOP_SIGNALS}
    node = None
    try:
        node = factory()
        executor = rclpy.get_global_executor()
        executor.add_node(node)
        while not stopping and rclpy.ok():
            executor.spin_once(timeout_sec=SIGNAL_POLL_S)
    except (ConfigError, InvalidParameterValueException, InvalidParameterTypeException) as exc:
        print(f"{name}: invalid parameters: {exc}")
        raise SystemExit(2) from None
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A timer that fires while the context is torn down from outside fails to publish:
        # that is shutdown, not an error. Anything else is re-raised.
        if rclpy.ok() and not stopping:
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        if not stopping:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if stopping:
        _exit_stopped()


def _exit_stopped() -> None:
    """Exit with status 0 once the node is destroyed and rclpy shut down, skipping the
    interpreter's teardown of its modules: with torch loaded that took 2-5 s of the
    policy's exit on two busy cores (0.2 s without), against the 5 s after which
    ``ros2 launch`` escalates to SIGTERM. The context is released first, so the DDS
    participant says goodbye; this process registers no exit handlers of its own."""
    rclpy.get_default_context().destroy()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
