"""diffusion_policy_ros: language-conditioned diffusion policy grasping with ROS 2.

Pure algorithm packages (``perception``, ``policy``, ``control``, ``sim``,
``learning``) never import rclpy; ``ros`` holds the thin node adapters.
"""

__version__ = "0.1.0"
