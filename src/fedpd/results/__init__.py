"""Reading run directories back (:mod:`~fedpd.results.runs`), ``fedpd compare`` tables fitted to
the terminal or as CSV / JSON / Markdown (:mod:`~fedpd.results.tables`), and ``fedpd plot``
figures of metrics or of a run's label split (:mod:`~fedpd.results.figures`).

Import from those modules: the package itself imports none of them, so reading runs and
printing tables (``fedpd compare``) loads neither torch nor matplotlib."""
