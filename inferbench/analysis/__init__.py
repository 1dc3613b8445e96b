"""Analysis of result records: the one ranking rule and its verdicts (:mod:`.ranking`), the answer as text
(:mod:`.answer`), the files a run writes (:mod:`.runfiles`), comparisons across runs (:mod:`.comparison`), tables of
records in pandas (:mod:`.frames`), figures (:mod:`.plots`) and the report (:mod:`.report`).

Nothing is imported here: a run writes its summary without pandas or matplotlib; the frames and figures import
them when asked for (:mod:`inferbench.api` is the public entry)."""
