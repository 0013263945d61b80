"""Thin rclpy adapters: parameters, QoS, message <-> numpy, timers, diagnostics."""
