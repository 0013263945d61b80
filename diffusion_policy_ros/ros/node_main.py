"""The ``main()`` every node executable shares: init, spin, clean shutdown on SIGINT/SIGTERM."""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from diffusion_policy_ros.config import ConfigError
from diffusion_policy_ros.ros.dds_profiles import use_package_dds_profiles


def run_node(factory: Callable[[], Node], name: str, args=None) -> None:
    """Spin ``factory()`` until shutdown; invalid parameters exit with status 2."""
    use_package_dds_profiles(args)
    rclpy.init(args=args)
    node = None
    try:
        node = factory()
        rclpy.spin(node)
    except (ConfigError, InvalidParameterValueException, InvalidParameterTypeException) as exc:
        print(f"{name}: invalid parameters: {exc}")
        raise SystemExit(2) from None
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A timer that fires while SIGTERM tears the context down fails to publish;
        # that is shutdown, not an error. Anything else while running is re-raised.
        if rclpy.ok():
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
