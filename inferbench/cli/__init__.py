"""inferbench.cli."""
