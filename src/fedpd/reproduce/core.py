"""``fedpd reproduce NAME``: run an experiment's configs × seeds at a budget and write its report."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fnmatch
import gc
import itertools
import os
import shlex
import sys
import textwrap
import time
from importlib import resources
from pathlib import Path

from fedpd.errors import ConfigError
from fedpd.io import atomic_write_text
from fedpd.reproduce import report as rep
from fedpd.reproduce import records
from fedpd.config import RESUMABLE, apply_overrides, load_config
from fedpd.io import read_jsonl
from fedpd.reproduce.execute import (CONFIG, EARLY, METRICS, TRAJECTORY, _environment, default_jobs, plan,
                                     run_jobs, validate)
from fedpd.reproduce.spec import BUDGETS, Experiment


def experiments() -> dict[str, Experiment]:
    """Every reproduction, by name (imported on demand: the CLI stays fast)."""
    from fedpd.reproduce import (afedpd_paper, feddyn_note, fedpd_paper, fedplus_paper, fedplus_standard,
                                 fedplus_sweep, robustness, time_claims)

    found: dict[str, Experiment] = {}
    for module in (fedpd_paper, feddyn_note, fedplus_paper, fedplus_sweep, fedplus_standard, afedpd_paper, robustness,
                   time_claims):
        for exp in module.EXPERIMENTS:
            found[exp.name] = exp
    return found


def get(name: str) -> Experiment:
    table = experiments()
    if name not in table:
        raise ConfigError(
            f"reproduce: unknown experiment {name!r} (allowed: {', '.join(table)}; fedpd reproduce --list)"
        )
    return table[name]


def listing_table() -> tuple[list, list[dict]]:
    """``fedpd reproduce --list`` as a table: one row per experiment and budget."""
    from fedpd.results.tables import Column

    from fedpd.reproduce.costs import medium_hours

    columns = [
        Column(key, key, key in ("runs", "seeds", "core_hours"))
        for key in ("experiment", "title", "source", "datasets", "budget", "runs", "seeds", "core_hours", "note")
    ]
    rows = []
    for exp in experiments().values():
        for b in BUDGETS:
            if b in exp.budgets:
                budget = exp.budgets[b]
                hours = medium_hours(exp.name) if b == "medium" else None
                rows.append({"experiment": exp.name, "title": exp.title, "source": exp.source,
                             "datasets": " ".join(exp.datasets_for(budget)), "budget": b,
                             "runs": len(exp.runs(budget)), "seeds": len(budget.seeds),
                             "core_hours": "" if hours is None else f"{hours:.1f}", "note": budget.note})
    return columns, rows


def listing(width: int) -> str:
    """``fedpd reproduce --list`` for a terminal ``width`` columns wide: each experiment's name on a
    line of its own, its title, source and datasets, then one entry per budget (the first sentence
    of its note), long text wrapped."""
    def fill(text: str, first: str, indent: int) -> str:
        return textwrap.fill(text, width, initial_indent=first, subsequent_indent=" " * indent, break_on_hyphens=False)

    lines = []
    for name, group in itertools.groupby(listing_table()[1], key=lambda row: row["experiment"]):
        rows = list(group)
        lines += [name, fill(rows[0]["title"], "    ", 8), fill(rows[0]["source"], "    source: ", 8)]
        if rows[0]["datasets"]:
            lines.append(fill(f"{rows[0]['datasets']}, which must be in the data directory ($FEDPD_DATA, or "
                              f"--data-dir)", "    needs: ", 8))
        for row in rows:
            runs, seeds = row["runs"], row["seeds"]
            cost = f" (about {row['core_hours']} core-hours)" if row["core_hours"] else ""
            counts = f"{runs:>4} run{'s' * (runs != 1)}, {seeds} seed{'s' * (seeds != 1)}: "
            head = f"    --budget {row['budget']:<8} {counts}"
            if len(head) + 20 > width:  # a narrow terminal: the budget on a line of its own
                lines.append(f"    --budget {row['budget']}")
                head = " " * 8 + counts.lstrip()
            lines.append(fill(row["note"].split(". ")[0] + cost, head, 8))
    return "\n".join(lines)


def reading(name: str) -> str | None:
    """The maintainers' reading of the reduced-budget results (reproduce/readings/<name>.md)."""
    try:
        return resources.files("fedpd.reproduce").joinpath("readings", f"{name}.md").read_text()
    except (FileNotFoundError, OSError):
        return None


def check_data(exp: Experiment, budget, data_dir: str | None) -> None:
    from fedpd.data import dataset_status

    for name in exp.datasets_for(budget):
        status = dataset_status(name, data_dir)
        if status.state != "present":
            raise ConfigError(
                f"reproduce {exp.name}: dataset {name} is {status.state} ({status.detail or status.where}); "
                f"give --data-dir or set FEDPD_DATA to the folder that holds it"
            )


def select(specs: list, runs: str | None, name: str) -> list:
    """The runs of ``specs`` that ``runs`` picks (None: every run): comma-separated glob patterns
    (:mod:`fnmatch`, ``*`` also crossing "/") on the run key as the progress lines show it
    (``GROUP/sSEED``, e.g. ``cifar10-lenet/dir0.1/fedavg/s0``); a pattern may match the whole key
    or its last parts (``dir0.1/*/s0``, ``fedavg/*``). A pattern that matches no run is one line
    listing a few keys: a typo must not silently run less than asked."""
    if runs is None:
        return list(specs)
    patterns = [p.strip() for p in runs.split(",") if p.strip()]
    if not patterns:
        raise ConfigError(f"reproduce {name} --runs {runs!r}: no pattern (e.g. --runs 'dir0.1/*/s0')")

    def tails(key: str) -> list[str]:
        parts = key.split("/")
        return ["/".join(parts[i:]) for i in range(len(parts))]

    chosen = set()
    for pattern in patterns:
        hit = {s.key for s in specs if any(fnmatch.fnmatchcase(t, pattern) for t in tails(s.key))}
        if not hit:
            some = [s.key for s in specs[:: max(1, len(specs) // 4)]][:4]
            raise ConfigError(f"reproduce {name} --runs: {pattern!r} matches none of the {len(specs)} runs (their keys "
                              f"look like {', '.join(some)})")
        chosen |= hit
    return [s for s in specs if s.key in chosen]


#: run options ``fedpd reproduce --set`` may change: how a run is executed, not what it computes
#: (a record's config then still matches the experiment's, :meth:`fedpd.config.Config.fingerprint`);
#: not run.rounds, the budget's
EXECUTION = tuple(k for k in RESUMABLE if k != "rounds")


def run_options(options: list[str] | tuple[str, ...] | None, name: str) -> list[str]:
    """``--set run.KEY=VALUE`` items checked: only :data:`EXECUTION` keys (one line otherwise)."""
    for item in options or ():
        key = item.partition("=")[0].strip()
        section, _, option = key.partition(".")
        if "=" not in item or section != "run" or option not in EXECUTION:
            raise ConfigError(f"reproduce {name} --set {item!r}: only how the runs execute may be set (allowed: "
                              f"{', '.join('run.' + k for k in EXECUTION)}, as run.KEY=VALUE); what they compute is "
                              "the experiment's")
    return list(options or ())


def with_options(spec, options: list[str]):
    """``spec`` with the ``--set`` execution options applied to its config."""
    return dataclasses.replace(spec, config=apply_overrides(spec.config, options)) if options else spec


def check_devices(cfgs, name: str) -> None:
    """Every run.device the runs name is present here (before anything is written or runs)."""
    from fedpd.build import resolve_device

    for device in sorted({c.run.device for c in cfgs}):
        try:
            resolve_device(device)
        except ConfigError as err:
            raise ConfigError(f"reproduce {name}: {err}") from None


def reproduce(name: str, budget: str | None = None, out: str | Path | None = None, jobs: int | None = None,
              data_dir: str | None = None, progress: bool = True, keep_checkpoints: bool = False,
              configs_only: bool = False, command: str | None = None, cluster=None,
              report_only: bool = False, runs: str | None = None, options: list[str] | None = None) -> Path:
    """Run experiment ``name`` at ``budget`` (default "reduced") and write its report into ``out``
    (default ``reproductions/<name>-<budget>``); returns the README's path.

    A run whose record (``out/records/``, :mod:`fedpd.reproduce.records`) holds the config asked for
    is done and never runs again; every other run runs (a complete run directory in ``out/runs/``
    is recorded as it is, an interrupted one resumed) and leaves its record as it finishes.
    ``report_only``: run nothing, render the report from the records alone (the budget, when not
    given, is the one the records name). ``configs_only``: write the resolved configs and stop;
    ``cluster``: run each run as a task on a Ray cluster (:class:`fedpd.reproduce.cluster.Cluster`;
    the run directories come back into ``out``). ``runs``: run only the runs these patterns pick
    (:func:`select`; the others' records, if any, still make the report, which lists the runs not
    recorded yet); ``options``: ``--set run.KEY=VALUE`` items of how the runs made now execute
    (:data:`EXECUTION`, e.g. ``run.device=cuda``), which leave the report's configs as they are."""
    exp = get(name)
    out_given = out is not None
    options = run_options(options, name)
    if runs is not None and (report_only or configs_only):
        raise ConfigError("reproduce --runs: picks the runs to run (or --estimate, --verify); --report-only and "
                          "--configs-only take every run of the budget")
    if options and (report_only or configs_only):
        raise ConfigError("reproduce --set: sets how the runs made now execute; --report-only and --configs-only "
                          "run nothing (the configs they write are the experiment's)")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"reproduce: --jobs {jobs} (allowed: 1 or more)")
    if report_only and (configs_only or cluster is not None):
        raise ConfigError("reproduce: --report-only runs nothing; it cannot be combined with --configs-only or --ray")
    if report_only and not out_given:
        raise ConfigError("reproduce --report-only: give --out, the report folder that holds the records")
    out = Path(out) if out_given else None
    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a directory")
    held = records.load(out / "records") if out is not None else {}
    if budget is None:
        budget = budget_of(name, held) if report_only else "reduced"
    if budget not in exp.budgets:
        raise ConfigError(f"reproduce {name}: unknown budget {budget!r} (allowed: {', '.join(exp.budgets)})")
    b = exp.budgets[budget]
    out = out if out is not None else Path("reproductions") / f"{name}-{budget}"
    specs = exp.runs(b)
    cfgs = validate(specs)  # every config checked before anything is written
    chosen = {s.key for s in select(specs, runs, name)}
    recorded, stale = {}, []
    for spec, cfg in zip(specs, cfgs):
        rec = held.get(spec.key)
        if rec is not None:
            differs = rec.config_difference(cfg)
            if not differs:
                recorded[spec.key] = rec
            elif spec.key in chosen:  # run again now (a stale record of a run not picked just counts as missing)
                stale.append((spec.key, differs))
    if report_only:
        if not recorded:
            raise ConfigError(f"reproduce {name} --report-only: {out / 'records'} holds no record of the {budget} "
                              f"budget's runs" + (f" ({len(stale)} of another config: first {stale[0][0]}, "
                                                  f"{stale[0][1]} differs)" if stale else ""))
        return write_report(exp, b, specs, out, recorded)
    if stale and progress:
        print(f"{len(stale)} records hold another config and are run again (first: {stale[0][0]}, {stale[0][1]} "
              "differs)", file=sys.stderr)
    # seed-major: a budget stopped part-way leaves whole seeds of every setting, which a paired
    # report can already read, rather than every seed of the first settings and none of the rest
    pending = sorted((s for s in specs if s.key in chosen and s.key not in recorded), key=lambda s: s.seed)
    work = plan([with_options(s, options) for s in pending], out / "runs")
    if not configs_only and cluster is None:  # on a cluster the nodes read the data and hold the devices
        check_data(exp, b, data_dir)  # before anything is written
        check_devices([j.cfg for j in work], name)
    out.mkdir(parents=True, exist_ok=True)
    n_configs = rep.write_configs(specs, out / "configs")
    if configs_only:
        print(f"wrote {n_configs} configs ({len(specs)} runs with the seeds) to {out / 'configs'}")
        return out / "configs"
    jobs = jobs or default_jobs()
    env = {"FEDPD_DATA": str(Path(data_dir).resolve())} if data_dir else None
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    command = command or recorded_command(sys.argv[2:])  # the command line, with no path of this machine
    package = Path(__file__).resolve().parents[1]
    commit = rep.git_commit(package)  # marked when fedpd's code has uncommitted changes now

    def committed_code() -> str:
        """The commit a run finishing now names: the invocation's, marked as uncommitted changes when
        the code changed while it ran (a worker process imports the code when it starts); a commit
        of anything else meanwhile (the records landing) changes nothing."""
        if not commit or rep.same_code(package, commit):
            return commit
        return f"{commit.split(' ')[0]} {rep.UNCOMMITTED}"

    def record(job, provenance: dict) -> None:
        early = read_jsonl(job.path / EARLY) if (job.path / EARLY).is_file() else None
        recorded[job.spec.key] = records.write(
            out / "records", job.spec, b.name, load_config(job.path / CONFIG).resolved(),
            read_jsonl(job.path / METRICS), provenance, job.path / TRAJECTORY if job.spec.trace else None, early)

    logged = _logged_invocations(out)
    for job in work:
        if job.status == "complete":  # finished before records existed, or its record was lost: record it now
            inv = logged.get(job.spec.key, {})
            record(job, records.provenance(inv.get("command", command), inv.get("started", started), None,
                                           records.machine(job.cfg.run.threads, job.cfg.run.device),
                                           inv.get("commit", ""), adopted=True))
    try:
        run_jobs(work, jobs, progress=progress, keep_checkpoints=keep_checkpoints, title=f"{name} ({budget})", env=env,
                 cluster=cluster, on_done=lambda job, seconds, ran_on: record(
                     job, records.provenance(command, started, seconds, ran_on, committed_code())))
    except BaseException:  # a failure or Ctrl-C: the report shows what is recorded so far, and the error goes on
        if recorded:
            with contextlib.suppress(Exception):
                write_report(exp, b, specs, out, recorded)
        raise
    return write_report(exp, b, specs, out, recorded)


def _logged_invocations(out: Path) -> dict[str, dict]:
    """{run key: the invocation that completed it} from the log older versions kept
    (``invocations.jsonl``), for run directories recorded afterwards."""
    path = out / "invocations.jsonl"
    found: dict[str, dict] = {}
    for inv in read_jsonl(path) if path.is_file() else []:
        for key in inv.get("runs", []):
            found[key] = inv
    return found


def budget_of(name: str, held: dict) -> str:
    """The largest budget a report folder's records were made at: a run two budgets share (the same
    config) keeps the budget it was made at, so a medium report may hold reduced records, never the
    other way round. One line when there are no records, or records of a budget the experiment has not."""
    order = list(get(name).budgets)
    budgets = {r.budget for r in held.values()}
    if not budgets:
        raise ConfigError(f"reproduce {name} --report-only: no run records in the report folder")
    unknown = sorted(budgets - set(order))
    if unknown:
        raise ConfigError(f"reproduce {name} --report-only: records of budget {unknown[0]!r}, which {name} does "
                          f"not have (allowed: {', '.join(order)}): give --budget")
    return max(budgets, key=order.index)


#: the flags of ``fedpd reproduce`` that take a path, and what an absolute one is recorded as
PATH_FLAGS = {"--data-dir": "DATA_DIR", "--out": "OUT_DIR"}


def recorded_command(args: list[str]) -> str:
    """The command line a report records for ``fedpd reproduce ARGS``, with no path of the machine
    that ran it (a report is read, and rerun, elsewhere): a --data-dir equal to $FEDPD_DATA is
    written "$FEDPD_DATA"; an absolute --data-dir or --out inside the working directory is written
    relative to it; any other absolute path (or one above the working directory) as DATA_DIR or
    OUT_DIR. Relative paths are kept: they name nothing outside the directory the command ran in."""
    def portable(flag: str, value: str) -> str:
        path = Path(value).expanduser()
        env = os.environ.get("FEDPD_DATA")
        if flag == "--data-dir" and env and path.resolve() == Path(env).expanduser().resolve():
            return '"$FEDPD_DATA"'
        if not path.is_absolute() and ".." not in path.parts:
            return shlex.quote(value)
        try:
            return shlex.quote(str(path.resolve().relative_to(Path.cwd().resolve())))
        except ValueError:
            return PATH_FLAGS[flag]

    words, pending = [], None
    for arg in args:
        flag, eq, value = arg.partition("=")
        if pending:
            words.append(portable(pending, arg))
            pending = None
        elif flag in PATH_FLAGS and eq:
            words.append(f"{flag}={portable(flag, value)}")
        else:
            words.append(shlex.quote(arg))
            pending = arg if arg in PATH_FLAGS else None
    return " ".join(["fedpd reproduce", *words])


#: problem options that change what the data are, not how much work a round is: settings that differ
#: only in these (and the seeds) are measured once by :func:`estimate`
COST_FREE = ("seed", "partition", "alpha", "balanced", "heterogeneity", "non_iid", "variant")


def estimate(name: str, budget: str = "medium", rounds: int = 2, data_dir: str | None = None,
             progress: bool = True, runs: str | None = None, options: list[str] | None = None) -> dict:
    """The cost of ``name`` at ``budget`` from short runs: for each setting (settings that differ
    only in :data:`COST_FREE` share one measurement), the first seed is built and run ``rounds``
    rounds in this process, one thread, timing CPU seconds of the set-up, of a round and of an
    evaluation; the run's cost is set-up + its rounds × round + its evaluations × evaluation, and
    the budget's the sum over its runs. CPU time, not wall time, so other processes' turns do not
    count; a loaded machine still measures high (shared caches, memory bandwidth). ``runs``: only
    the runs these patterns pick (:func:`select`); ``options``: ``--set run.KEY=VALUE`` items
    (:func:`run_options`; on a GPU CPU time is not the cost: benchmarks/gpu_afedpd.py times by wall
    clock). Returns {"core_hours", "runs", "measured", "rows": per measured setting}."""
    import json

    import torch

    from fedpd.build import build_problem  # noqa: F401  (imported before timing: not a cost of the runs)
    from fedpd.reproduce.spec import merge
    from fedpd.simulation import Simulation

    exp = get(name)
    if budget not in exp.budgets:
        raise ConfigError(f"reproduce {name}: unknown budget {budget!r} (allowed: {', '.join(exp.budgets)})")
    if rounds < 1:
        raise ConfigError(f"reproduce --estimate {rounds} (allowed: 1 or more rounds)")
    b = exp.budgets[budget]
    options = run_options(options, name)
    specs = [with_options(s, options) for s in select(exp.runs(b), runs, name)]
    check_data(exp, b, data_dir)
    check_devices(validate(specs), name)
    env = {"FEDPD_DATA": str(Path(data_dir).resolve())} if data_dir else {}

    def cost_key(spec) -> str:
        cfg = copy.deepcopy(spec.config)
        for k in COST_FREE:
            cfg.get("problem", {}).pop(k, None)
        cfg.get("run", {}).pop("seed", None)
        return json.dumps(cfg, sort_keys=True, default=str)

    keyed: dict[str, list] = {}
    for spec in specs:
        keyed.setdefault(cost_key(spec), []).append(spec)
    rows, total = [], 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _environment(env):
            for i, members in enumerate(keyed.values(), 1):
                spec = members[0]
                cfg = load_config(merge(spec.config, {"run": {"rounds": rounds, "workers": 1, "threads": 1}}))
                c0 = time.process_time()
                sim = Simulation(cfg)
                try:
                    c1 = time.process_time()
                    sim.metrics()
                    c2 = time.process_time()
                    for _ in range(rounds):
                        sim.step()
                    c3 = time.process_time()
                finally:
                    sim.close()
                    del sim
                    gc.collect()  # a finished Simulation's reference cycles hold its data set (execute.py)
                setup, evaluation, per_round = c1 - c0, c2 - c1, (c3 - c2) / rounds
                cost = 0.0
                for m in members:
                    run_cfg = load_config(m.config).run
                    evals = run_cfg.rounds // run_cfg.eval_every + 1 + (run_cfg.rounds % run_cfg.eval_every != 0)
                    cost += setup + run_cfg.rounds * per_round + evals * evaluation
                total += cost
                rows.append({"setting": spec.group, "runs": len(members), "setup_s": round(setup, 2),
                             "round_s": round(per_round, 3), "eval_s": round(evaluation, 3),
                             "core_hours": round(cost / 3600, 3)})
                if progress:
                    print(f"[{i}/{len(keyed)}] {spec.group} (+{len(members) - 1} like it): set-up {setup:.1f} s, "
                          f"round {per_round:.3f} s, evaluation {evaluation:.3f} s CPU", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(threads)
    return {"core_hours": total / 3600, "runs": len(specs), "measured": len(keyed), "rows": rows}


def write_report(exp: Experiment, budget, specs, out: Path, recorded: dict) -> Path:
    """The report of ``specs`` from their ``recorded`` run records (runs without one count as
    missing): README.md, results.csv, configs/ and the figures. Nothing in it depends on when or
    where it is rendered, so the same records always give the same report."""
    results = rep.Results([rep.Run(s, recorded[s.key].metrics if s.key in recorded else [], None,
                                   recorded[s.key].trajectory if s.key in recorded else None) for s in specs])
    rep.write_configs(specs, out / "configs")
    rep.write_results_csv(results, out / "results.csv",
                          {k: r.provenance.get("commit", "") for k, r in recorded.items()})
    sections = exp.report(results, budget, out)
    done = [recorded[s.key] for s in specs if s.key in recorded]
    missing = [s.key for s in specs if s.key not in recorded]
    compute = sum(float(r.provenance.get("compute_s") or 0.0) for r in done)
    rounds = sorted({int(r.last.get("round", 0)) for r in results.runs if r.records})
    latest = max((r.provenance.get("finished", "") for r in done), default="")[:10]
    rebuild = f"fedpd reproduce {exp.name} --budget {budget.name} --report-only --out <this folder>"
    head = [
        f"# {exp.title}",
        "",
        f"Reproduces: {exp.source}.",
        "",
        f"Built from the {len(done)} run records in `records/` (the latest finished on {latest}) by `{rebuild}`. "
        'Everything below, but the section "Reading", is written by that command from the records.',
        "",
        "## Budget",
        "",
        f"Budget **{budget.name}**: {budget.note}",
        "",
        f"- {len(specs)} runs: {len({s.group for s in specs})} settings × seeds {', '.join(map(str, budget.seeds))} "
        f"({_other_seeds(specs, budget.seeds)}each seed s sets `run.seed = s`"
        f"{' and `problem.seed = s`' if _problem_seeded(specs) else ''}); rounds per run: "
        f"{', '.join(map(str, rounds)) or '—'}; mean ± std is over the seeds (sample std, n − 1).",
        (
            f"- **{len(missing)} of the {len(specs)} runs are not recorded yet** (the tables and claims use the "
            f"{len(done)} that are; `fedpd reproduce {exp.name} --budget {budget.name} --out <this folder>` runs the "
            f"rest): {', '.join(f'`{k}`' for k in missing[:12])}"
            f"{f' and {len(missing) - 12} more' if len(missing) > 12 else ''}."
            if missing
            else f"- Every one of the {len(specs)} runs is recorded."
        ),
        f"- Compute: {compute:.0f} s summed over the runs' own `wall_s` (rounds and evaluations; one CPU thread "
        f"each unless the machine says otherwise), {compute / 3600:.2f} core-hours.",
        "- The runs were made by:",
        "",
        rep.provenance_table(done),
        "",
    ]
    note = rep.uncommitted_note(done, exp.name)
    if note:
        head[-1:-1] = ["", note]
    body = "\n\n".join(sections)
    text = reading(exp.name)
    tail = ["", "## Reading", ""]
    if text:
        tail.append(text.strip())
    else:
        tail.append("_No reading has been written for this experiment yet._")
    tail += ["", "## Files", "",
             "- `configs/`: the resolved config of every setting (first seed; the header says what the other seeds "
             "change). Run one with `fedpd run configs/<setting>.toml`.",
             "- `results.csv`: every run's labels, seed, final metrics and the fedpd commit that ran it.",
             "- `records/`: one record per finished run (`<run>.json.gz`: its config, every evaluation's metrics, "
             "and where, when and by what it ran); the report is rebuilt from them alone.",
             "- `runs/` (not committed): the run directories, a cache of the runs in progress."]
    path = out / "README.md"
    atomic_write_text(path, "\n".join(head) + "\n" + body + "\n" + "\n".join(tail) + "\n")
    return path


def _other_seeds(specs, seeds) -> str:
    """"13 of them on seeds 3, 4 only; " for the settings not run on every seed of the budget (a
    held-out check, a setting a paper runs once); "" when there are none."""
    by_group: dict[str, set[int]] = {}
    for s in specs:
        by_group.setdefault(s.group, set()).add(s.seed)
    other = [g for g, got in by_group.items() if got != set(seeds)]
    if not other:
        return ""
    sets: dict[tuple[int, ...], int] = {}
    for on in (tuple(sorted(by_group[g])) for g in other):
        sets[on] = sets.get(on, 0) + 1
    if len(sets) > 1:  # settings on several other seed sets (more seeds where a few left a claim undecided)
        return "other seeds: " + "; ".join(f"{n} of them on seed{'s' * (len(on) > 1)} {', '.join(map(str, on))}"
                                           for on, n in sets.items()) + "; "
    on = sorted(set().union(*(by_group[g] for g in other)))
    return f"{len(other)} of them on seed{'s' * (len(on) > 1)} {', '.join(map(str, on))} only; "


def _problem_seeded(specs) -> bool:
    return any(s.config.get("problem", {}).get("seed") == s.seed for s in specs)

