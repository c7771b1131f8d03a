"""The measured cost of each experiment's ``medium`` budget, quoted in its budget note and the report.

Two kinds of measurement, each named in its note: ``--estimate`` (``fedpd reproduce NAME --budget
medium --estimate ROUNDS``, :func:`fedpd.reproduce.core.estimate`: CPU seconds of the set-up, a
round and an evaluation of every setting, extrapolated to every run's rounds and evaluations), or
the compute the reduced budget's runs recorded (their ``wall_s``, one thread each, in the committed
report) scaled by the medium budget's runs and rounds (set-up not included). Both on this project's
2-core development machine. A report gives the actual compute after its runs.
"""

from __future__ import annotations

#: name -> (estimated core-hours of the medium budget, how it was measured)
MEASURED: dict[str, tuple[float, str]] = {
    "afedpd_table2": (50.6, "`fedpd reproduce afedpd_table2 --budget medium --estimate 2` (2026-11-25): per run "
                      "12 s of set-up, 32–34 s per round (FedSAM 62 s) and 66–72 s per evaluation of CPU time"),
    "fedpd_p_heterogeneity": (2.3, "the reduced run's 1 475 s for 60 runs × 600 rounds, scaled to 100 runs × 2 000 "
                              "rounds"),
    "fedpd_fig2": (3.3, "the reduced run's 4 808 s for 28 runs, scaled to 70 runs of the same 600 rounds"),
    "feddyn_fedpd": (0.1, "the reduced run's 21 s for 45 runs × 100 rounds, scaled to 90 runs × 500 rounds and "
                     "doubled for the trajectory pass"),
    "robustness": (1.5, "the reduced run's 944 s for 240 runs × 30 rounds, scaled to 400 runs × 100 rounds"),
    "fedplus_table2": (4.0, "the reduced run's seconds per round of each data set and setting (0.08–0.18 s on "
                       "MNIST, 0.02–0.04 s on the regression), times the medium budget's 270 runs' rounds"),
    "fedpd_femnist": (5.3, "the reduced run's 10.6 s per round (6 runs × 25 rounds), times 9 runs × 200 rounds"),
}


def cost_note(name: str) -> str:
    if name not in MEASURED:
        return "Cost not measured yet."
    hours, how = MEASURED[name]
    return (f"Estimated cost: {hours:.1f} core-hours (about {hours / 2:.1f} h on 2 cores with --jobs 2), from {how} "
            "(docs/reproductions/README.md).")


EXPERIMENTS = ("afedpd_table2", "fedplus_table2", "fedpd_fig2", "fedpd_p_heterogeneity", "fedpd_femnist", "robustness",
               "feddyn_fedpd")
MEDIUM_COST = {name: cost_note(name) for name in EXPERIMENTS}
