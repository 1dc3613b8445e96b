"""inferbench.registry."""
