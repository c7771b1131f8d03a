"""FedDyn ≡ FedPD (Zhang & Hong, "On the connection between FedDyn and FedPD", 2021).

The note proves that FedDyn (Acar et al. 2021; the note's Alg. 2) and FedPD (Alg. 1) produce the
same iterates x0^t when every client takes part in every round, FedPD never skips (p = 0) and the
local problems are solved exactly; its §3 derives it from the relations (11) ∇f_i(x_i^t) = λ_i^t
and h^t = mean_i λ_i^t. This reproduction stores the server model after every round of each run
(``trajectory.pt``) and measures how far the trajectories are apart: to rounding under the note's
assumptions, and how they part when each assumption is dropped — partial participation in
FedDyn (FedPD has none), communication skipping in FedPD (p > 0), inexact local solves (local GD,
where FedPD warm-starts from its last x_i and FedDyn from the server model).
"""

from __future__ import annotations

import math
import statistics

from fedpd.reproduce import report as rep
from fedpd.reproduce.costs import MEDIUM_COST
from fedpd.reproduce.spec import Budget, Claim, Experiment, grid

NOTE = "Zhang & Hong, *On the connection between FedDyn and FedPD* (2021)"

#: problem name -> (problem, solver): a quadratic with exact local solves (the note's setting) and
#: FedPD's non-convex logistic regression with 8 local GD steps (inexact)
PROBLEMS = {
    "ls": ({"name": "least_squares", "clients": 20, "dim": 10, "samples_per_client": 50, "heterogeneity": 3.0},
           {"name": "exact"}),
    "logreg": ({"name": "fedpd_logreg", "non_iid": "strong", "clients": 20, "samples_per_client": 100},
               {"name": "gd", "lr": 1.0, "local_steps": 8}),
}
ETA = 1.0

#: run name -> (label, [algorithm], [sampler] given N = 20)
RUNS = {
    "fedpd": ("FedPD, p = 0", {"name": "fedpd", "eta": ETA, "p": 0.0}, {"name": "all"}),
    "feddyn": ("FedDyn, all clients", {"name": "feddyn", "eta": ETA}, {"name": "all"}),
    "feddyn-k10": ("FedDyn, 10 of 20 per round", {"name": "feddyn", "eta": ETA}, {"name": "uniform", "clients_per_round": 10}),
    "feddyn-k4": ("FedDyn, 4 of 20 per round", {"name": "feddyn", "eta": ETA}, {"name": "uniform", "clients_per_round": 4}),
    "feddyn-k2": ("FedDyn, 2 of 20 per round", {"name": "feddyn", "eta": ETA}, {"name": "uniform", "clients_per_round": 2}),
    "fedpd-p0.5": ("FedPD, p = 0.5", {"name": "fedpd", "eta": ETA, "p": 0.5}, {"name": "all"}),
}
#: (problem, run) compared with (problem, "fedpd")
COMPARISONS = [("ls", "feddyn"), ("ls", "feddyn-k10"), ("ls", "feddyn-k4"), ("ls", "feddyn-k2"), ("ls", "fedpd-p0.5"),
               ("logreg", "feddyn"), ("logreg", "feddyn-k4")]


class FedDynFedPD(Experiment):
    name = "feddyn_fedpd"
    title = "FedDyn ≡ FedPD under full participation, and how they part"
    source = f"{NOTE}, §3 (the equivalence under full participation, p = 0 and exact local solves)"
    budgets = {
        "smoke": Budget("smoke", (0,), "5 rounds (tests only).", {"rounds": 5}),
        "reduced": Budget("reduced", (0, 1, 2, 3, 4), "100 rounds, 5 seeds; the note is a proof and has no experiment "
                          "or budget of its own.", {"rounds": 100}),
        "medium": Budget("medium", tuple(range(10)), "500 rounds, 10 seeds: the full budget, which fits a 2-core "
                         "machine. " + MEDIUM_COST["feddyn_fedpd"], {"rounds": 500}),
        "full": Budget("full", tuple(range(10)), "500 rounds, 10 seeds.", {"rounds": 500}),
    }

    def runs(self, budget):
        specs = []
        for prob, (problem, solver) in PROBLEMS.items():
            for run, (label, algorithm, sampler) in RUNS.items():
                if (prob, run) not in COMPARISONS and run != "fedpd":
                    continue
                cfg = {"problem": problem, "algorithm": algorithm, "solver": solver, "sampler": sampler,
                       "run": {"rounds": budget["rounds"], "eval_every": 1, "threads": 1,
                               "checkpoint_every": budget["rounds"], "dtype": "float64"}}
                specs += grid(f"{prob}/{run}", cfg, budget.seeds, {"problem": prob, "variant": run}, trace=True)
        return specs

    def report(self, results, budget, out):
        rows, curves = [], {}
        for prob, run in COMPARISONS:
            dists = []
            for a in results.select(problem=prob, variant=run):
                b = next(r for r in results.select(problem=prob, variant="fedpd") if r.seed == a.seed)
                ta, tb = a.trajectory(), b.trajectory()
                d = ((ta - tb).norm(dim=1) / tb.norm(dim=1).clamp(min=1e-300)).tolist()
                dists.append(d)
            curves[(prob, run)] = dists
            mx = [max(d[1:]) for d in dists]
            rows.append([PROBLEM_LABELS[prob], RUNS[run][0], rep.fmt_ms([d[1] for d in dists], "e"),
                         rep.fmt_ms([d[min(10, len(d) - 1)] for d in dists], "e"), rep.fmt_ms(mx, "e"),
                         rep.fmt_ms([d[-1] for d in dists], "e"), EXPECT.get((prob, run), "")])
        fig, axes = rep.figure(1, 2, size=(11, 4))
        for col, prob in enumerate(PROBLEMS):
            ax = axes[0][col]
            for (p, run), dists in curves.items():
                if p != prob:
                    continue
                rounds = list(range(1, len(dists[0])))
                mid = [math.exp(statistics.fmean(math.log(max(d[t], 1e-300)) for d in dists)) for t in rounds]
                ax.plot(rounds, [max(m, 1e-18) for m in mid], label=RUNS[run][0])
            ax.set_yscale("log")
            ax.set_xlabel("round t")
            ax.set_ylabel("‖x0ᵗ − x0ᵗ(FedPD, p = 0)‖ / ‖x0ᵗ(FedPD)‖")
            ax.set_title(PROBLEM_LABELS[prob])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        name = rep.save_figure(fig, out / "trajectories.png")
        fig, axes = rep.figure(1, 2, size=(11, 4))
        for col, prob in enumerate(PROBLEMS):
            ax = axes[0][col]
            for run in ["fedpd"] + [r for p, r in COMPARISONS if p == prob]:
                rep.band(ax, results.select(problem=prob, variant=run), "train_loss", label=RUNS[run][0], log=True)
            ax.set_yscale("log")
            ax.set_xlabel("round t")
            ax.set_ylabel("train loss f(x0ᵗ)")
            ax.set_title(PROBLEM_LABELS[prob])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        loss = rep.save_figure(fig, out / "train_loss.png")
        return ["## Distance between the trajectories\n\nRelative distance ‖x0ᵗ − x0ᵗ(FedPD, p = 0)‖ / ‖x0ᵗ(FedPD)‖ "
                "between the server models of the same seed (same data, same initial model; FedPD's model is the "
                f"mean of its clients' x0_i). Both use η = {ETA:g} (FedDyn's α = 1/η), λ_i⁰ = 0 and h⁰ = 0 (the note's "
                "eq. (10) asks for λ_i⁰ = h⁰ = ∇f_i(x⁰); any λ⁰ with h⁰ = mean λ⁰ gives the same argument). "
                "Evaluated in float64.\n\n" + rep.md_table(
                    ["problem", "compared with FedPD, p = 0", "after round 1", "after round 10", "largest",
                     f"after round {budget['rounds']}", "the note"], rows),
                f"## Figures\n\n![trajectories]({name})\n\n![train loss]({loss})",
                rep.claims_section(CLAIMS, results)]


PROBLEM_LABELS = {"ls": "least squares, exact local solves", "logreg": "FedPD's logistic regression, 8 local GD steps"}
EXPECT = {("ls", "feddyn"): "identical (§3)", ("ls", "feddyn-k10"): "not covered (partial participation)",
          ("ls", "feddyn-k4"): "not covered", ("ls", "feddyn-k2"): "not covered",
          ("ls", "fedpd-p0.5"): "not covered (p > 0)", ("logreg", "feddyn"): "not covered (inexact local solves)",
          ("logreg", "feddyn-k4"): "not covered"}


def _distances(results, prob, run, which=max):
    """Per seed, ``which`` (max, or a round index) of the relative distance to FedPD, p = 0."""
    out = []
    for a in results.select(problem=prob, variant=run):
        b = next(r for r in results.select(problem=prob, variant="fedpd") if r.seed == a.seed)
        ta, tb = a.trajectory(), b.trajectory()
        d = ((ta - tb).norm(dim=1) / tb.norm(dim=1).clamp(min=1e-300))
        out.append(d.max().item() if which is max else d[which].item())
    return out


def _identical(results):
    d = max(_distances(results, "ls", "feddyn"))
    return d < 1e-10, f"largest relative distance over all rounds and seeds: {d:.1e} (identical: < 1e-10, float64 rounding)"


def _parts_with_participation(results):
    runs = ("feddyn-k10", "feddyn-k4", "feddyn-k2")
    m = {run: statistics.fmean(_distances(results, "ls", run)) for run in runs}
    end = {run: statistics.fmean(_distances(results, "ls", run, -1)) for run in runs}
    ok = all(v > 1e-6 for v in m.values()) and m["feddyn-k10"] < m["feddyn-k2"]
    return ok, "largest relative distance (at the last round), mean over seeds: " + ", ".join(
        f"{RUNS[k][0]} {v:.2g} ({end[k]:.1g})" for k, v in m.items())


def _parts_with_skipping(results):
    d = statistics.fmean(_distances(results, "ls", "fedpd-p0.5"))
    end = statistics.fmean(_distances(results, "ls", "fedpd-p0.5", -1))
    return d > 1e-6, f"FedPD p = 0.5 against p = 0 (= FedDyn): largest relative distance {d:.2g}, at the last round {end:.2g}"


def _inexact(results):
    d = statistics.fmean(_distances(results, "logreg", "feddyn"))
    end = statistics.fmean(_distances(results, "logreg", "feddyn", -1))
    return d > 1e-8 and end < 1e-8, (f"8 local GD steps, all clients: largest relative distance {d:.2g}, at the last "
                                     f"round {end:.1g}")


CLAIMS = [
    Claim("with full participation, p = 0 and exact local solves FedDyn and FedPD generate the same x0ᵗ",
          "the note, §3 (relations (11)–(14))", _identical),
    Claim("(not in the note) with partial participation FedDyn leaves FedPD's trajectory, the more the fewer clients "
          "take part", "the note's setting of Alg. 2 (P_t ⊂ N)", _parts_with_participation),
    Claim("(not in the note) skipping communication (p > 0) leaves the trajectory of p = 0", "the note, §1 (FedPD's "
          "p)", _parts_with_skipping),
    Claim("(not in the note) with inexact local solves the trajectories differ, and meet again at the stationary point "
          "both converge to", "the note's third assumption", _inexact),
]

EXPERIMENTS = [FedDynFedPD()]
