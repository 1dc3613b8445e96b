"""Runners: one module per framework family, all behind the small interface in ``base``."""
