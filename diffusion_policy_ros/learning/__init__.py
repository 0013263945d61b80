"""Learning: episodes as rosbag2, datasets, training, distillation, pruning, RL (no rclpy)."""
