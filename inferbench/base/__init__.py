"""inferbench.base."""
