"""RGB-D perception core: sync buffer, decoding, back-projection, sampling (no rclpy)."""
