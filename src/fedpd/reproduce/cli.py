"""``fedpd reproduce``: the subcommand (its parser and handler live here; fedpd.cli only adds it)."""

from __future__ import annotations

import sys

from fedpd.errors import FedpdError
from fedpd.reproduce.cluster import add_cluster_options, cluster_from
from fedpd.reproduce.spec import BUDGETS


def cmd_reproduce(args) -> int:
    from fedpd.reproduce import core

    if args.list:
        if args.name:
            raise FedpdError("fedpd reproduce: give either NAME or --list, not both")
        if args.format == "table":
            from fedpd.results.tables import terminal_width

            print(core.listing(terminal_width()))
        else:
            from fedpd.results.tables import format_table

            sys.stdout.write(format_table(*core.listing_table(), args.format))
        return 0
    if args.format != "table":
        raise FedpdError("fedpd reproduce: --format applies to --list (a reproduction writes results.csv and its "
                         "report)")
    if not args.name:
        raise FedpdError("fedpd reproduce: missing NAME (fedpd reproduce --list shows the experiments)")
    if args.estimate is not None:
        args.budget = args.budget or "reduced"
        found = core.estimate(args.name, budget=args.budget, rounds=args.estimate, data_dir=args.data_dir,
                              progress=not args.quiet, runs=args.runs, options=args.set)
        print(f"{args.name} --budget {args.budget}: {found['runs']} runs, about {found['core_hours']:.2f} core-hours "
              f"(CPU time of {found['measured']} setting{'s' * (found['measured'] != 1)} measured over {args.estimate} "
              f"round{'s' * (args.estimate != 1)} each, extrapolated to every run's rounds and evaluations)")
        return 0
    if args.verify is not None:
        from fedpd.reproduce.verify import verify

        if args.out is None:
            raise FedpdError("fedpd reproduce --verify: give --out, the report folder that holds the records")
        if args.set:
            raise FedpdError("fedpd reproduce --verify: re-runs each record as it ran (on the CPU when its device is "
                             "not here); --set applies to runs made now")
        found = verify(args.name, args.out, args.verify, budget=args.budget, rounds=args.verify_rounds,
                       seed=args.verify_seed, data_dir=args.data_dir, progress=not args.quiet, runs=args.runs)
        bad = [v for v in found if not v.ok]
        print(f"{len(found) - len(bad)} of {len(found)} records agree with a re-run of their first rounds"
              + (f"; {bad[0].key} differs: {bad[0].mismatch}" if bad else ""))
        return 1 if bad else 0
    cluster = cluster_from(args)
    try:
        readme = core.reproduce(args.name, budget=args.budget, out=args.out, jobs=args.jobs, data_dir=args.data_dir,
                                progress=not args.quiet, keep_checkpoints=args.keep_checkpoints,
                                configs_only=args.configs_only, cluster=cluster, report_only=args.report_only,
                                command=core.recorded_command(args.argv[1:]), runs=args.runs, options=args.set)
    except KeyboardInterrupt:
        print("fedpd: interrupted (complete runs are kept, the others resume from their last checkpoint: run the "
              "same command again)", file=sys.stderr)
        return 130
    if not args.configs_only:
        print(f"report: {readme}")
    return 0


def add_reproduce_parser(sub) -> None:
    p = sub.add_parser("reproduce", help="run a paper's experiment (configs x seeds) and write its report")
    p.add_argument("name", nargs="?", help="experiment (fedpd reproduce --list)")
    p.add_argument("--list", action="store_true", help="the experiments, their sources and budgets")
    p.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"),
                   help="with --list: table (default: fitted to the terminal, long text wrapped), or csv, json, "
                   "markdown: every column (the budgets' whole notes), nothing else on stdout")
    p.add_argument(
        "--budget",
        choices=BUDGETS,
        default=None,
        help="smoke: a few rounds (tests); reduced (the default): under an hour on a 2-core CPU; medium: >= 3 "
        "seeds and enough work to test the paper's claims (hours; fedpd reproduce --list); full: the paper's "
        "(a cluster). With --report-only or --verify: the largest budget the records are of",
    )
    p.add_argument("--out", help="report directory (default reproductions/NAME-BUDGET); its runs/ holds the run "
                   "directories, and running the command again continues an interrupted reproduction")
    p.add_argument("--runs", metavar="PATTERNS", help="run only the runs whose key (as the progress lines show it, "
                   "GROUP/sSEED: cifar10-lenet/dir0.1/fedavg/s0) matches one of these comma-separated globs; a "
                   "pattern may match the key's last parts ('dir0.1/*/s0', '*/afedpd/*'). Records accumulate in "
                   "--out: the rest run later (the same command with other patterns, or none), and the report "
                   "meanwhile lists the runs not recorded yet. With --estimate: these runs' cost; with --verify: "
                   "among these runs' records")
    p.add_argument(
        "--set",
        action="append",
        metavar="run.KEY=VALUE",
        help="how the runs made now execute "
        "(repeatable; run.device=cuda; allowed: run.device, run.threads, run.workers, run.client_chunk and the "
        "rest of the README's RESUMABLE list but run.rounds). Not what they compute, so "
        "their records count as the experiment's wherever they ran",
    )
    p.add_argument("--jobs", type=int, help="runs at once, one process and one thread each (default: the CPU cores)")
    add_cluster_options(p)
    p.add_argument("--data-dir", help="datasets folder (default $FEDPD_DATA; with --ray, the same path on every node)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep checkpoint.pt of complete runs")
    p.add_argument("--configs-only", action="store_true", help="write the resolved configs and stop")
    p.add_argument("--estimate", type=int, metavar="ROUNDS", help="run nothing to completion: time ROUNDS rounds of "
                   "each setting (one thread, CPU time) and print the budget's estimated core-hours")
    p.add_argument("--report-only", action="store_true", help="run nothing: rebuild the report in --out from its "
                   "run records (records/) alone")
    p.add_argument("--verify", type=int, metavar="K", help="re-run K of the records in --out (a seeded choice) for "
                   "their first rounds and compare with what they recorded, by the rule for where they were made (the "
                   "same kind of CPU: float64 identical; another CPU or a GPU: a tolerance; each line names its rule: "
                   "docs/reproductions/README.md); exit 1 when one differs")
    p.add_argument("--verify-rounds", type=int, default=3, metavar="R", help="with --verify: re-run up to the "
                   "first evaluation at or after round R (default 3)")
    p.add_argument("--verify-seed", type=int, default=0, help="with --verify: the seed of the choice of records")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_reproduce)
