"""The ``fedpd`` command: run, list, plot, compare, demo (and data, for datasets; reproduce, for the papers).

Every error in what the user gave — config, arguments, files, paths the OS refuses — is one
line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from fedpd.errors import FedpdError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise FedpdError(f"{self.prog}: {message}")


def _cmd_run(args) -> int:
    from fedpd.runner import run

    if args.resume and args.config:
        raise FedpdError("fedpd run: give either CONFIG or --resume DIR, not both")
    if not args.resume and not args.config:
        raise FedpdError("fedpd run: missing CONFIG (a .toml file) or --resume DIR")
    if args.resume and (args.out is not None or args.overwrite):
        flag = "--out" if args.out is not None else "--overwrite"
        raise FedpdError(f"fedpd run: {flag} cannot be combined with --resume (the run continues in DIR)")
    out = args.out
    if out is None and not args.resume:
        import time
        from pathlib import Path

        out = Path("runs") / f"{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    result = run(args.config, out, overrides=args.set or (), resume=args.resume, progress=not args.quiet,
                 overwrite=args.overwrite)
    last = result.history[-1] if result.history else {}
    from fedpd.progress import summary

    print(f"finished round {last.get('round')}: {summary(last)}\nrun directory: {result.out_dir}")
    return 0


def _cmd_list(args) -> int:
    from fedpd import registry

    for title, table in registry.CATALOG.items():
        print(f"{title}:")
        width = max(len(k) for k in table)
        for name, entry in table.items():
            print(f"  {name:<{width}}  {entry.description}")
    try:
        from fedpd.models import MODELS

        print("models:")
        width = max(len(k) for k in MODELS)
        for name, (_, desc) in MODELS.items():
            print(f"  {name:<{width}}  {desc}")
    except ImportError:
        pass
    return 0


def _cmd_plot(args) -> int:
    from fedpd.results import plot_runs, plot_split

    if args.split:
        if len(args.dirs) != 1 or args.metric:
            raise FedpdError("fedpd plot --split: give one run directory and no --metric")
        path = plot_split(args.dirs[0], output=args.output)
    elif args.metric is None:
        raise FedpdError("fedpd plot: --metric is required (or --split for the label distribution)")
    else:
        path = plot_runs(args.dirs, args.metric, x=args.x, output=args.output)
    print(f"wrote {path}")
    return 0


def _cmd_compare(args) -> int:
    from fedpd.results import compare_rows, print_table

    header, rows = compare_rows(args.dirs)
    print_table(header, rows)
    return 0


def _cmd_demo(args) -> int:
    from fedpd.demo import run_demo

    run_demo(args.out, rounds=args.rounds, progress=not args.quiet)
    return 0


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedpd", description="Federated optimisation: primal-dual, Fed+ and classic baselines.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a config (or resume a run directory)")
    r.add_argument("config", nargs="?", help="TOML config file")
    r.add_argument("--out", help="run directory to write (default runs/<config>-<time>)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)")
    r.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    r.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    r.set_defaults(func=_cmd_run)

    ls = sub.add_parser("list", help="algorithms, problems, solvers and samplers")
    ls.set_defaults(func=_cmd_list)

    pl = sub.add_parser("plot", help="draw a metric of several runs on one figure (or a run's label split)")
    pl.add_argument("dirs", nargs="+", help="run directories")
    pl.add_argument("--metric", help="metric key, e.g. grad_norm_sq, train_loss, test_acc")
    pl.add_argument("--x", default="round", help="x axis: round, comm_rounds, uplink_floats, downlink_floats, sample_grads, wall_s")
    pl.add_argument("--split", action="store_true",
                    help="instead: the label distribution (clients x classes) of one run's training split")
    pl.add_argument("-o", "--output", default="plot.png", help="figure to write; the suffix picks the format "
                    "(.png, .pdf, .svg, .jpg, ...)")
    pl.set_defaults(func=_cmd_plot)

    cp = sub.add_parser("compare", help="table of final and best metrics of several runs")
    cp.add_argument("dirs", nargs="+", help="run directories")
    cp.set_defaults(func=_cmd_compare)

    dm = sub.add_parser("demo", help="FedPD Fig. 2(b): FedAvg, FedProx, FedPD (p = 0, 0.5) on strongly non-iid data")
    dm.add_argument("--out", help="where to write the runs and the plot (default runs/demo-<time>)")
    dm.add_argument("--rounds", type=int, default=600, help="rounds per run (default 600)")
    dm.add_argument("--quiet", action="store_true")
    dm.set_defaults(func=_cmd_demo)

    try:
        from fedpd.data.cli import add_data_parser
    except ImportError:
        pass
    else:
        add_data_parser(sub)
    from fedpd.reproduce.cli import add_reproduce_parser

    add_reproduce_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        return args.func(args)
    except FedpdError as err:
        print(f"fedpd: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedpd: interrupted (the last checkpoint is intact; continue with fedpd run --resume DIR)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `fedpd list | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except OSError as err:  # a path that cannot be created, read or written
        where = f"{err.filename}: " if err.filename else ""
        print(f"fedpd: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
