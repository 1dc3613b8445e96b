"""Measurement: the one timing loop, its statistics, and host memory."""
