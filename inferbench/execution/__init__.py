"""inferbench.execution."""
