"""The measured cost of each experiment's ``medium`` budget, quoted in its budget note and the report.

Two kinds of measurement, each named in its note: ``--estimate`` (``fedpd reproduce NAME --budget
medium --estimate ROUNDS``, :func:`fedpd.reproduce.core.estimate`: CPU seconds of the set-up, a
round and an evaluation of every setting, extrapolated to every run's rounds and evaluations), or
the compute the reduced budget's runs recorded (their ``wall_s``, one thread each, in the committed
report) scaled by the medium budget's runs and rounds (set-up not included). Both on this project's
2-core development machine. A report gives the actual compute after its runs.
"""

from __future__ import annotations

#: name -> (estimated core-hours of the medium budget, how it was measured); ESTIMATE: measured with
#: ``fedpd reproduce NAME --budget medium --estimate ROUNDS`` on 2026-11-25 at a load average of 5–14
#: (a loaded machine measures high: fedpd_femnist's 14–22 s per round against 10.6 s on 2026-11-23)
ESTIMATE = "`fedpd reproduce {name} --budget medium --estimate {rounds}` (CPU time, 2026-11-25, load average {load})"
#: robustness: `fedpd reproduce robustness --budget reduced --estimate 2` (153 cost settings) was
#: killed for memory after 38 on 2026-11-26 (each problem's first evaluation left its training set resident,
#: 188 MB of MNIST: fixed since in fedpd.evaluation.chunk_size), so a subset was timed with the same
#: function (fedpd.reproduce.core.estimate, 2 rounds), one estimate call per subset
ROBUSTNESS_HOW = ("timing with `--estimate 2`'s function (CPU time, 2026-11-26, load average 15–17) every method "
                  "without attack and every attack with FedAvg on MNIST i.i.d., a cell costing its method's round plus "
                  "its attack's extra over FedAvg's: 0.45–0.65 s per round of the MLP for FedAvg and the aggregators, "
                  "0.7–1.2 s for the Fed+ methods, 0.05 s for a DP run's round (logistic regression)")
MEASURED: dict[str, tuple[float, str]] = {
    "afedpd_table2": (44.5, "`fedpd reproduce afedpd_table2 --budget medium --estimate 1` (CPU time, 2026-11-26, "
                      "load average 4–5): per run 11–15 s of set-up, 32–35 s per round (FedSAM, A-FedPDSAM 62–64 s) "
                      "and 9 s per evaluation (test accuracy and loss, the training loss on 5 000 images; before the "
                      "runs chose their metrics: 66–72 s, 50.6 core-hours)"),
    "fedpd_femnist": (9.5, ESTIMATE.format(name="fedpd_femnist", rounds=2, load="5–7")
                      + ": 14–22 s per round; the reduced runs' 10.6 s per round (2026-11-23) give 5.3"),
    "fedplus_table2": (5.4, ESTIMATE.format(name="fedplus_table2", rounds=3, load="7") + ": 1.6 for the paper and "
                       "project settings' 270 runs, and 3.8 for the κ setting's 219 (`--runs 'kappa/*' --estimate 3`, "
                       "CPU time, 2026-11-27, load average 9–11)"),
    "fedplus_standard": (2.0, "`fedpd reproduce fedplus_standard --budget medium --estimate 2` (CPU time, 2026-11-27, "
                         "load average 8–9): 0.35–0.84 s per synthetic round (E = 20 epochs of up to 80 steps), "
                         "0.15–0.85 s per MNIST round"),
    "fedplus_kappa": (1.1, "`fedpd reproduce fedplus_kappa --budget medium --estimate 3` (CPU time, 2026-11-27, load "
                      "average 9–11)"),
    "fedpd_fig2": (1.8, ESTIMATE.format(name="fedpd_fig2", rounds=3, load="6")),
    "fedpd_p_heterogeneity": (2.0, ESTIMATE.format(name="fedpd_p_heterogeneity", rounds=5, load="6")),
    "feddyn_fedpd": (0.1, ESTIMATE.format(name="feddyn_fedpd", rounds=5, load="6")),
    "robustness": (5.5, ROBUSTNESS_HOW),
    "time_to_target": (0.25, "`fedpd reproduce time_to_target --budget medium --estimate 5` (CPU time, 2026-12-02, "
                       "load average 3): 0.005–0.1 s per round or server update (FedPD, every client a round: the "
                       "most), 0.01 s per evaluation, under 1 s of set-up; loading MNIST adds a few seconds of wall "
                       "clock per run"),
}


#: the heterogeneous part of robustness: fedpd.reproduce.core.estimate("robustness", "medium", rounds=1,
#: runs="hetero/dir0.3/none/*/s0,hetero/dir0.3/*/fedavg/s0,hetero/dir0.3/optimal_alie/*/s0"), 51 settings, then each
#: of the 260 cells costed as below and multiplied by the 3 seeds
HETERO_COST = ("The heterogeneous part adds about 36 core-hours (about 18 h on 2 cores with --jobs 2; 780 runs of "
               "100 rounds), measured on its first 48 runs (seed 0 of the trimmed mean and Krum with and without NNM, "
               "2026-11-28, --jobs 2 on a quiet 2-core machine): a run under a fixed attack takes a median 110 s, one "
               "under a searched attack 280–610 s (median 485 s: 20 simulated defences a round, the most after NNM); "
               "the 120 searched runs are 45 % of the total. Its held-out seeds add 65 runs, about 4 core-hours (the "
               "ARC → NNM → trimmed mean runs of seeds 0–2: a median 110 s under a fixed attack, 670 s under a "
               "searched one). The held-out settings add 1 146 runs of 30 rounds (every defence under 10 attacks on 2 "
               "settings, 3 seeds), about 20 core-hours from the timings of their first 168 runs (2026-12-02, --jobs 2 "
               "on a quiet 2-core machine: 1.1 s per round under a fixed attack, 6 s under a searched one, which are "
               "228 of the runs and 58 % of the total; Fashion-MNIST's rounds cost what MNIST's do: the same model and "
               "image size).")

#: core-hours a medium budget adds beyond MEASURED's figure, in parts its note costs separately: the
#: heterogeneous part (36), its held-out seeds (4) and held-out settings (20), HETERO_COST; the seeds added
#: later where the first ones left a claim undecided (MORE_SEEDS)
EXTRA_HOURS = {"robustness": 60.0, "fedplus_table2": 0.9, "fedplus_standard": 1.3, "fedpd_fig2": 2.8}
#: how the added seeds of EXTRA_HOURS were costed: ``--estimate`` of the settings they add, CPU time, 2026-12-02
MORE_SEEDS = {
    "fedplus_table2": "The Fed+ variants' κ seeds 3–9 on MNIST-robust add about 0.9 core-hours (`--runs "
    "'kappa/mnist-robust-*/fed*_plus/*,project/mnist-robust-*/*' --estimate 3`, CPU time, 2026-12-02, "
    "load average 5–7: 0.03–0.12 s per round, 0.2 s per evaluation).",
    "fedplus_standard": "The synthetic data set's seeds 3–9 add about 1.3 core-hours (`--runs 'synthetic/*' --estimate "
    "2`, CPU time, 2026-12-02, load average 5: 0.17–0.33 s per round).",
    "fedpd_fig2": "The SGD curves' seeds 5–14 add about 2.8 core-hours (`--runs '*/fedavg-sgd/*,*/fedpd-sgd/*' "
    "--estimate 3`, CPU time, 2026-12-02, load average 3–5: 0.40–0.44 s per round).",
}


def medium_hours(name: str) -> float | None:
    """The medium budget's estimated core-hours in all (``fedpd reproduce --list``), None if not measured."""
    return MEASURED[name][0] + EXTRA_HOURS.get(name, 0.0) if name in MEASURED else None


def cost_note(name: str) -> str:
    if name not in MEASURED:
        return "Cost not measured yet."
    hours, how = MEASURED[name]
    return (f"Estimated cost: {hours:.1f} core-hours (about {hours / 2:.1f} h on 2 cores with --jobs 2), from {how} "
            "(docs/reproductions/README.md).")


EXPERIMENTS = ("afedpd_table2", "fedplus_table2", "fedplus_standard", "fedplus_kappa", "fedpd_fig2",
               "fedpd_p_heterogeneity", "fedpd_femnist", "robustness", "feddyn_fedpd", "time_to_target")
MEDIUM_COST = {name: cost_note(name) for name in EXPERIMENTS}
