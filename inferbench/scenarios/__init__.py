"""Scenarios: the protocol a cell follows in its child process (phases, in order, in each module's
docstring). Adding a scenario = one module with a session class + one entry in :mod:`inferbench.registry.scenarios`
(``--scenario`` offers every entry): ``Session(job, emit)`` sets the cell up, ``.block(round)`` measures one
round's block and returns a short summary, ``.finish()`` returns the :class:`~inferbench.spec.CellOutcome`.
"""
