"""More seeds where a few left a claim undecided: the medium budgets that run some settings on more
seeds than the rest, the κ setting's shared grid value on seeds its other setting has not run, and
how a report's budget line names settings on other seeds."""

from __future__ import annotations

from fedpd.reproduce import core, fedplus_paper
from fedpd.reproduce import report as rep
from fedpd.reproduce.spec import RunSpec, seeded


def _seeds(name: str) -> dict[str, set[int]]:
    exp = core.get(name)
    found: dict[str, set[int]] = {}
    for spec in exp.runs(exp.budgets["medium"]):
        found.setdefault(spec.group, set()).add(spec.seed)
    return found


def test_fig2_runs_its_sgd_curves_on_more_seeds_than_the_rest():
    seeds = _seeds("fedpd_fig2")
    for group, got in seeds.items():
        sgd = group.split("/")[1] in ("fedavg-sgd", "fedpd-sgd")
        assert got == set(range(15 if sgd else 5)), group


def test_fedplus_standard_runs_the_synthetic_data_on_ten_seeds_and_mnist_on_three():
    for group, got in _seeds("fedplus_standard").items():
        assert got == set(range(10 if group.startswith("synthetic/") else 3)), group


def test_the_kappa_setting_runs_fedplus_on_mnist_robust_on_ten_seeds():
    """Every other κ cell keeps seeds 0-2; the Fed+ variants on MNIST-robust run 0-9, and their shared
    grid value (σ = 1: the project setting's runs, seeds 0-4) runs in the κ setting on 5-9 only, with
    the project setting's config."""
    exp = core.get("fedplus_table2")
    specs = exp.runs(exp.budgets["medium"])
    seeds: dict[str, set[int]] = {}
    for s in specs:
        seeds.setdefault(s.group, set()).add(s.seed)
    kappa = {g: got for g, got in seeds.items() if g.startswith("kappa/")}
    more = {g for g in kappa if g.split("/")[1] in fedplus_paper.MNIST_ROBUST
            and g.split("/")[2] in fedplus_paper.FEDPLUS_METHODS}
    assert len(more) == 18  # 2 data sets x 3 variants x 3 grid values
    for g, got in kappa.items():
        want = (set(range(5, 10)) if g.endswith("/sigma1") else set(range(10))) if g in more else {0, 1, 2}
        assert got == want, g
    by_key = {s.key: s for s in specs}
    own = by_key["kappa/mnist-robust-n50/fedcomed_plus/sigma1/s7"]
    assert own.labels["value"] == fedplus_paper.shared_value("mnist-robust-n50", "fedcomed_plus")
    project = fedplus_paper.setting_config("project", "mnist-robust-n50", "fedcomed_plus", 500)
    assert own.config == seeded(project, 7)
    assert by_key["project/mnist-robust-n50/fedcomed_plus/s4"].config == seeded(project, 4)
    assert all(s.seed in (0, 1, 2) for s in specs if s.group.startswith("kappa/regression/"))


def _run(labels: dict, seed: int, acc: float) -> rep.Run:
    group = "/".join(f"{k}={v}" for k, v in labels.items())
    return rep.Run(RunSpec(f"{group}/s{seed}", group, seed, {}, dict(labels)),
                   [{"round": 500, "personal_acc": acc / 100}])


def test_a_shared_grid_value_takes_the_other_settings_runs_and_its_own_on_the_rest():
    """σ = 1 on seeds 0-4 from the project setting, on 5-9 from the κ setting's own runs; the project's
    seeds the cell's κ runs have not are left out (a cell on seeds 0-2 reads seeds 0-2 of it)."""
    d, m = "mnist-robust-n10", "fedcomed_plus"
    lo, mid, hi = fedplus_paper.grid_values(d, m)
    runs = [_run({"setting": "project", "dataset": d, "method": m}, s, 85.0) for s in range(5)]
    runs += [_run({"setting": "kappa", "dataset": d, "method": m, "value": mid}, s, 86.0) for s in range(5, 10)]
    runs += [_run({"setting": "kappa", "dataset": d, "method": m, "value": v}, s, 80.0)
             for v in (lo, hi) for s in range(10)]
    by_value = fedplus_paper.grid_results(rep.Results(runs), d, m)
    assert by_value[mid] == {**{s: 85.0 for s in range(5)}, **{s: 86.0 for s in range(5, 10)}}
    values, chosen = fedplus_paper.tuned(rep.Results(runs), d, m)
    assert sorted(chosen) == list(range(10)) and set(chosen.values()) == {mid}
    three = [r for r in runs if r.seed < 3 or r.labels.get("setting") == "project"]
    assert sorted(fedplus_paper.grid_results(rep.Results(three), d, m)[mid]) == [0, 1, 2]


def test_the_budget_line_names_each_set_of_other_seeds():
    def specs(groups: dict[str, tuple[int, ...]]) -> list[RunSpec]:
        return [RunSpec(f"{g}/s{s}", g, s, {}) for g, seeds in groups.items() for s in seeds]

    one = specs({"a": (0, 1, 2, 3, 4), "b": (0, 1, 2)})
    assert core._other_seeds(one, (0, 1, 2, 3, 4)) == "1 of them on seeds 0, 1, 2 only; "
    several = specs({"a": (0, 1, 2, 3, 4), "b": (0, 1, 2), "c": (0, 1, 2), "d": tuple(range(10)), "e": (5,)})
    assert core._other_seeds(several, (0, 1, 2, 3, 4)) == (
        "other seeds: 2 of them on seeds 0, 1, 2; 1 of them on seeds 0, 1, 2, 3, 4, 5, 6, 7, 8, 9; 1 of them on "
        "seed 5; ")
