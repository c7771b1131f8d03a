"""Reading run directories back (:mod:`~fedpd.results.runs`), ``fedpd compare`` tables fitted to
the terminal or as CSV / JSON / Markdown (:mod:`~fedpd.results.tables`), and ``fedpd plot``
figures of metrics or of a run's label split (:mod:`~fedpd.results.figures`)."""

from fedpd.results.figures import class_names, label_counts, plot_runs, plot_split, runs_figure
from fedpd.results.runs import Run, best, load_run, read_run, run_labels, split_metrics
from fedpd.results.tables import (Column, compare_table, format_table, print_table, render_table,
                                  terminal_width)

__all__ = ["Column", "Run", "best", "class_names", "compare_table", "format_table", "label_counts", "load_run",
           "plot_runs", "plot_split", "print_table", "read_run", "render_table", "run_labels", "runs_figure",
           "split_metrics", "terminal_width"]
