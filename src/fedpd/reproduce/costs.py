"""The measured cost of each experiment's ``medium`` budget, quoted in its budget note and the report.

Each figure is an estimate from a short run of every setting (``fedpd reproduce NAME --budget
medium --estimate ROUNDS``, :func:`fedpd.reproduce.core.estimate`): seconds per round of each
setting's first seed, times its rounds and seeds, summed; one thread per run, on this project's
2-core development machine (the load average at the time is given: a loaded machine measures
slower). A run directory's report gives the actual compute after the runs (``wall_s``).
"""

from __future__ import annotations

#: name -> (estimated core-hours of the medium budget, the measuring command, date, load average)
MEASURED: dict[str, tuple[float, str, str, str]] = {}


def cost_note(name: str) -> str:
    if name not in MEASURED:
        return "Cost not measured yet."
    hours, command, date, load = MEASURED[name]
    return (f"Estimated cost: {hours:.1f} core-hours (about {hours / 2:.1f} h on 2 cores with --jobs 2), measured "
            f"with `{command}` on {date} (load average {load}).")


EXPERIMENTS = ("afedpd_table2", "fedplus_table2", "fedpd_fig2", "fedpd_p_heterogeneity", "fedpd_femnist", "robustness",
               "feddyn_fedpd")
MEDIUM_COST = {name: cost_note(name) for name in EXPERIMENTS}
