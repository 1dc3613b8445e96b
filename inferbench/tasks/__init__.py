"""The tasks: one module each (a :class:`inferbench.registry.tasks.TaskModule`), entered in
:data:`inferbench.registry.tasks.TASKS`. NumPy only: post-processing runs the same code for every runtime."""
