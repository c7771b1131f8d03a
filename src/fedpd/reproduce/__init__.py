"""Reproductions of the source papers' experiments: ``fedpd reproduce NAME`` (``--list``).

Each experiment (one module per paper) is data — configs × seeds at a budget
(:mod:`fedpd.reproduce.spec`) — run in parallel processes, resumably
(:mod:`fedpd.reproduce.execute`), and read back into a report directory: tables of mean ± std over
seeds beside the paper's published numbers, the paper's plots on the same axes, the exact configs,
the budget, the command and the date (:mod:`fedpd.reproduce.report`, :mod:`fedpd.reproduce.core`).
The reports of the reduced budget are committed under ``docs/reproductions/``.
"""

from fedpd.exports import lazy

__all__ = ["experiments", "get", "reproduce"]
__getattr__, __dir__ = lazy(__name__, dict.fromkeys(__all__, "fedpd.reproduce.core"))
