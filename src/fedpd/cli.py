"""The ``fedpd`` command: run, list, show, plot, compare, demo (and data, for datasets; reproduce,
for the papers; flower, for deployments).

Every error in what the user gave — config, arguments, files, paths the OS refuses — is one
line on stderr and exit status 2, never a traceback. A run whose metrics become NaN or ±Inf
stops with exit status 3 (unless ``run.allow_nonfinite = true``); Ctrl-C exits with 130. A
reader that leaves a pipe (``fedpd run ... | grep -m1 round``) stops nothing: the rest of that
output is dropped, the command runs to its end, and a run says so on stderr.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fedpd.errors import FedpdError

#: the run directory being written, for the Ctrl-C message (and the demo's folder)
_CURRENT: dict[str, Path | str | None] = {"dir": None, "demo": None, "command": None}

EXIT_CODES = """exit status: 0 done; 2 bad input (config, arguments, files: one line on stderr); 3 a run's
metrics became NaN or Inf (the run stopped; run.allow_nonfinite = true runs on); 130 interrupted."""


class UsageError(FedpdError):
    """Arguments a command does not take; printed as ``<command>: error: <message>``."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise UsageError(self.prog, message)


def _version() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("fedpd")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        from fedpd import __version__ as ours
    try:
        theirs = version("torch")  # the installed distribution's: no 2-second import of torch
    except PackageNotFoundError:  # pragma: no cover - a torch not installed by pip
        import torch

        theirs = torch.__version__
    return f"fedpd {ours} (torch {theirs}, Python {platform.python_version()})"


class _VersionAction(argparse.Action):
    """``--version``, worked out only when asked."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.update(nargs=0, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit(0)


def _threads_override(args) -> list[str]:
    return [] if getattr(args, "threads", None) is None else [f"run.threads={args.threads}"]


NO_GROUP_HELP = "one row per run, also for runs that differ only in seeds (default: one row per config over its seeds)"
UNSET_HELP = ("remove a key from the config, e.g. a plug-in's own option when --set algorithm.name=fedavg "
              "switches to a built-in that does not take it: --unset algorithm.q (repeatable; a dotted KEY reaches "
              "into a table; a key the config does not hold is left alone; not with --resume)")


def _overrides(args) -> list[str]:
    """--unset and --set, in that order, as load_config's overrides (an unset is a config.Unset)."""
    from fedpd.config import Unset

    return [*(Unset(key) for key in getattr(args, "unset", None) or ()), *(args.set or ())]


def _unknown_key_hint(err: FedpdError, args) -> FedpdError:
    """An unknown key in a section whose name --set changed: say that --unset drops it."""
    import re

    found = re.match(r"(\w+)\.([\w.]+): unknown key", str(err))
    if found and any(s.split("=", 1)[0].strip() == f"{found[1]}.name" for s in args.set or ()):
        return type(err)(f"{err}; the new {found[1]} does not take it: drop it with --unset {found[1]}.{found[2]}")
    return err


def _cmd_run(args) -> int:
    from fedpd.runner import run

    if args.resume and args.config:
        raise FedpdError("fedpd run: give either CONFIG or --resume DIR, not both")
    if not args.resume and not args.config:
        raise FedpdError("fedpd run: missing CONFIG (a .toml file) or --resume DIR")
    if args.resume and args.unset:
        raise FedpdError("fedpd run: --unset cannot be combined with --resume (the run continues its own config)")
    if args.resume and (args.out is not None or args.overwrite):
        flag = "--out" if args.out is not None else "--overwrite"
        raise FedpdError(f"fedpd run: {flag} cannot be combined with --resume (the run continues in DIR)")
    out = args.out
    if out is None and not args.resume:
        import time

        out = Path("runs") / f"{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    _CURRENT["dir"] = Path(args.resume or out)
    try:
        result = run(args.config, out, overrides=[*_overrides(args), *_threads_override(args)], resume=args.resume,
                     progress=not args.quiet, overwrite=args.overwrite)
    except FedpdError as err:
        raise _unknown_key_hint(err, args) from None
    last = result.history[-1] if result.history else {}
    from fedpd.progress import summary

    print(f"finished round {last.get('round')}: {summary(last)}\nrun directory: {result.out_dir}")
    return 0


def _cmd_list(args) -> int:
    from fedpd import describe

    if args.name is None:
        describe.print_list()
        return 0
    found = describe.resolve(args.name)
    for i, (section, name) in enumerate(found):
        if i:
            print()
        if name is None:
            if section in describe.FIXED:
                describe.show(section, None)
            else:
                describe.print_list(section)
        else:
            describe.show(section, name)
    return 0


def _cmd_show(args) -> int:
    from fedpd import describe

    section, name = describe.check_show(args.section, args.name)
    describe.show(section, name)
    return 0


def _cmd_plot(args) -> int:
    from fedpd.results.figures import plot_runs, plot_split

    if args.split:
        if len(args.dirs) != 1 or args.metric:
            raise FedpdError("fedpd plot --split: give one run directory and no --metric")
        path = plot_split(args.dirs[0], output=args.output)
    elif not args.metric:
        raise FedpdError("fedpd plot: --metric is required (or --split for the label distribution)")
    else:
        yscale = "log" if args.logy else "linear" if args.linear else "auto"
        path = plot_runs(args.dirs, args.metric, x=args.x, output=args.output, yscale=yscale,
                         group=not args.no_group, title=args.title)
    print(f"wrote {path}")
    return 0


def _cmd_compare(args) -> int:
    from fedpd.results.runs import split_metrics
    from fedpd.results.tables import compare_table, print_table

    from fedpd.results.targets import parse_target, target_measures

    metrics = split_metrics(args.metrics) if args.metrics else None
    measures = [m for text in args.target or () for m in target_measures(parse_target(text))]
    print_table(*compare_table(args.dirs, metrics, group=not args.no_group, measures=measures), fmt=args.format)
    return 0


def _cmd_status(args) -> int:
    from fedpd import status

    if args.notices < 0:
        raise FedpdError(f"--notices {args.notices}: allowed 0 or more")
    worst, rows = 0, []
    for out in args.dirs:
        record = status.read(Path(out))
        if not record:
            raise FedpdError(f"{out!r}: not a fedpd run directory (no config.toml, no status.json)")
        code = status.exit_code(record["state"])
        worst = code if worst == 0 or code == status.ENDED_EARLY else worst
        rows.append({"dir": str(out), "exit": code, **record})
        if args.format == "table":
            print(status.describe(Path(out), record))
            for note in record.get("notices", [])[-args.notices:] if args.notices else []:
                print(f"  round {note.get('round')}: {note.get('text')}")
    if args.format == "json":
        import json

        print(json.dumps(rows, indent=1))
    return worst


def _cmd_sweep(args) -> int:
    from fedpd.reproduce.cluster import cluster_from
    from fedpd.results.tables import compare_table, print_table
    from fedpd.sweep import (choice_lines, choose, parse_grid, parse_seeds, parse_select, parse_vary,
                             selection_measures, sweep)

    seeds = parse_seeds(args.seeds) if args.seeds else None
    grid, vary = parse_grid(args.grid or ()), parse_vary(args.vary)
    selection = parse_select(args.select) if args.select else None
    out = args.out
    if out is None:
        import time

        out = f"runs/sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        dirs = sweep(args.configs, out, seeds=seeds, overrides=_overrides(args), jobs=args.jobs,
                     progress=not args.quiet, cluster=cluster_from(args), grid=grid, vary=vary)
    except FedpdError as err:
        raise _unknown_key_hint(err, args) from None
    measures, chosen = [], []
    if selection is not None:
        choices, scores = choose(dirs, out, selection)
        measures, chosen = selection_measures(selection, choices, scores, out), choice_lines(selection, choices)
    if not args.quiet or args.format != "table":
        labels = [p.relative_to(out).as_posix() for p in dirs]  # <config>[/<key=value>...]/s<seed>
        print_table(*compare_table(dirs, labels=labels, group=not args.no_group, measures=measures), fmt=args.format,
                    title=f"{len(dirs)} runs in {out}")
    if chosen:  # with --format csv, json or markdown, stdout holds only the table
        import textwrap

        from fedpd.results.tables import terminal_width

        where = sys.stdout if args.format == "table" else sys.stderr
        print("\n".join(textwrap.fill(line, terminal_width(), subsequent_indent="    ") for line in chosen), file=where)
    return 0


def _cmd_demo(args) -> int:
    from fedpd.demo import run_demo

    def started(path: Path) -> None:
        _CURRENT["dir"] = path
        _CURRENT["demo"] = path.parent

    run_demo(args.out, rounds=args.rounds, progress=not args.quiet, overwrite=args.overwrite,
             threads=args.threads or 0, on_run=started, fmt=args.format)
    return 0


def _interrupted() -> str:
    """The Ctrl-C line: the run directory being written and whether it holds a checkpoint."""
    from fedpd.runner import CHECKPOINT

    where, demo = _CURRENT["dir"], _CURRENT["demo"]
    if where is None:
        return "fedpd: interrupted"
    again = (f"; fedpd demo --out {shlex.quote(str(demo))} --overwrite starts the demo again" if demo is not None
             else "")
    if (where / CHECKPOINT).exists():
        return (f"fedpd: interrupted; {where} holds the last checkpoint: continue that run with "
                f"fedpd run --resume {shlex.quote(str(where))}{again}")
    if demo is not None:
        return f"fedpd: interrupted before the first checkpoint of {where}{again}"
    return (f"fedpd: interrupted before the first checkpoint of {where}: nothing to resume "
            f"(run it again with --overwrite)")


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedpd", description="Federated optimisation on heterogeneous clients: primal-dual (FedPD,\n"
                "FedDyn, FedADMM, A-FedPD), Fed+ and classic baselines on one simulator.",
                epilog="Start with: fedpd demo. Every command has --help.\n\n" + EXIT_CODES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=_VersionAction, help="print fedpd's version (and torch's) and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="run a config, or continue a run directory (--resume)",
                       description="Run a TOML config into a run directory (config.toml, metrics.jsonl, "
                       "checkpoint.pt), or continue one from its last checkpoint.",
                       epilog="examples:\n  fedpd run examples/fedpd.toml --out runs/fedpd --set algorithm.p=0.3\n"
                       "  fedpd run my.toml --out runs/fedavg --set algorithm.name=fedavg --unset algorithm.q\n"
                       "  fedpd run --resume runs/fedpd --set run.rounds=1000\n\n" + EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", nargs="?", help="TOML config file (fedpd list shows what it can name)")
    r.add_argument("--out", metavar="DIR", help="run directory to write (default runs/<config>-<time>)")
    r.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override a config value, TOML syntax (repeatable; a dotted KEY reaches into a table: "
                   "algorithm.aggregator_options.m=2); on --resume only the target run.rounds and how the run is "
                   "executed (the README's RESUMABLE list: run.threads, run.device, run.engine, ...)")
    r.add_argument("--unset", action="append", metavar="SECTION.KEY", help=UNSET_HELP)
    r.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    r.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    r.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads (run.threads; 0: automatic, see README); changes no result, also on --resume")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    r.set_defaults(func=_cmd_run)

    ls = sub.add_parser("list", help="what a config can name; with NAME: its options, defaults and ranges",
                        description="Without NAME: every problem, algorithm, aggregator, solver, sampler, attack "
                        "and model with a one-line description, installed plug-ins too (with where they come "
                        "from), and the [run] and [privacy] sections. With NAME: that entry's options (defaults, "
                        "types, ranges, meaning), or every entry of a section (e.g. fedpd list samplers; fedpd list "
                        "run; fedpd list privacy).",
                        epilog="examples:\n  fedpd list\n  fedpd list fedpd\n  fedpd list samplers\n  fedpd list krum",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("name", nargs="?", metavar="NAME", help="an entry (e.g. fedpd, sgd, dataset) or a section")
    ls.set_defaults(func=_cmd_list)

    sh = sub.add_parser("show", help="the options of one entry: fedpd show SECTION NAME",
                        description="The options of one entry, with defaults, types, allowed ranges and "
                        "meaning, read from the same models that validate configs; NAME may be your own code's "
                        "import path (docs/extending.md).",
                        epilog="examples:\n  fedpd show algorithm fedpd\n  fedpd show solver sgd\n  fedpd show run\n"
                        "  fedpd show privacy\n  fedpd show algorithm my_fedpd:FedExP",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sh.add_argument("section", metavar="SECTION",
                    help="problem, algorithm, aggregator, solver, sampler, attack, model, run or privacy")
    sh.add_argument("name", nargs="?", metavar="NAME", help="the entry, or an import path package.module:Attribute "
                    "(not for run or privacy)")
    sh.set_defaults(func=_cmd_show)

    pl = sub.add_parser("plot", help="draw metrics of runs (one panel each), or a run's label split",
                        description="One panel per metric, one line per run. Runs of one config that differ only "
                        "in seeds become their mean with a band of ± one standard deviation, named in the legend by "
                        "the config values that tell the groups apart. The y axis is "
                        "logarithmic for grad_norm_sq (and residuals), linear for accuracies, else logarithmic "
                        "when the values span more than two decades.",
                        epilog="examples:\n  fedpd plot runs/fedpd runs/fedavg --metric grad_norm_sq,train_loss "
                        "--x comm_rounds -o fig.pdf\n  fedpd plot runs/fedpd --split -o split.png",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    pl.add_argument("dirs", nargs="+", metavar="DIR", help="run directories")
    pl.add_argument("--metric", action="append", metavar="KEY[,KEY]",
                    help="metric key(s) of metrics.jsonl, e.g. grad_norm_sq, train_loss, test_acc, personal_acc; "
                    "comma-separated or repeated: one panel each")
    pl.add_argument("--x", default="round", metavar="AXIS",
                    choices=("round", "comm_rounds", "uplink_floats", "downlink_floats", "sample_grads", "wall_s",
                             "sim_time_s"),
                    help="x axis: round (default), comm_rounds, uplink_floats, downlink_floats, sample_grads, wall_s, "
                    "sim_time_s (the simulated time of [system])")
    scale = pl.add_mutually_exclusive_group()
    scale.add_argument("--logy", action="store_true", help="logarithmic y axis for every panel")
    scale.add_argument("--linear", action="store_true", help="linear y axis for every panel")
    pl.add_argument("--no-group", action="store_true", help="one line per run, even for several seeds of one config")
    pl.add_argument("--title", help="figure title")
    pl.add_argument("--split", action="store_true",
                    help="instead: the label distribution (clients x classes) of one run's training split")
    pl.add_argument("-o", "--output", default="plot.png", metavar="FILE", help="figure to write (default plot.png); "
                    "the suffix picks the format (.png, .pdf, .svg, .jpg, ...)")
    pl.set_defaults(func=_cmd_plot)

    cp = sub.add_parser("compare", help="final and best metrics of runs: one row per config, mean ± sd over its seeds",
                        description="Final and best value of every metric the runs recorded, the final value "
                        "of each counter, and each run's aggregator, attack and privacy where a run sets them; one "
                        "row per run, or, where runs differ only in seeds, one row per config with n and each "
                        "metric's mean, sd and 95 % confidence interval over the seeds. The table fits the terminal "
                        "(least important columns left out, and named); --format csv, json or markdown prints every "
                        "column for other programs.",
                        epilog="examples:\n  fedpd compare runs/fedpd runs/fedavg\n"
                        "  fedpd compare runs/* --format csv > results.csv\n"
                        "  fedpd compare runs/fedbuff runs/fleet --target test_acc=0.6",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cp.add_argument("dirs", nargs="+", metavar="DIR", help="run directories")
    _format_option(cp)
    cp.add_argument("--metrics", metavar="KEY[,KEY]", action="append",
                    help="metrics to show (default: every metric the runs report, the personal metrics, losses, "
                    "grad_norm_sq and accuracies first)")
    cp.add_argument("--no-group", action="store_true", help=NO_GROUP_HELP)
    cp.add_argument("--target", metavar="METRIC=VALUE", action="append",
                    help="also when each run first reached it: rounds, uplink floats and simulated seconds ([system]); "
                    "METRIC>=VALUE or <=VALUE, or = (at least for an accuracy, at most otherwise); '-': never")
    cp.set_defaults(func=_cmd_compare)

    st = sub.add_parser(
        "status",
        help="how runs went: finished, running, or ended early (and why); exit status says",
        description="One line per run directory: finished, running, or how it ended early (failed, "
        "stopped, refused, died: its server process is gone), where, and how to continue it; then the "
        "last notices of a run on nodes (dropouts, rejected uploads, nodes gone). A Flower deployment's "
        "flwr run exits 0 whatever happened: this is what a script checks.",
        epilog="exit status: 0 every run finished; 4 a run is still running (none ended early); "
        "1 a run ended early; 2 bad input.\n\nexamples:\n  fedpd status deploy/run\n"
        "  flwr run deploy/app local-tls --stream; fedpd status deploy/run || echo 'not finished'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    st.add_argument("dirs", nargs="+", metavar="DIR", help="run directories")
    st.add_argument("--notices", type=int, default=5, metavar="N", help="the last N notices of each run (default 5; "
                    "0: none)")
    st.add_argument("--format", default="table", choices=("table", "json"),
                    help="table (default), or json: every run's whole record, for other programs")
    st.set_defaults(func=_cmd_status)

    sw = sub.add_parser(
        "sweep",
        help="several configs and/or seeds as independent runs, in parallel processes",
        description="Run every CONFIG with every seed (and every --grid value) as its own run "
        "directory, OUT/<config>/[<key=value>/]s<seed>, --jobs at a time in processes of one CPU thread "
        "each, with one progress display; then the fedpd compare table of all of them, a row per "
        "config (and grid value) over its seeds, and with --select the value each config does best "
        "with. Run the same command again to continue a sweep that stopped: complete runs are "
        "skipped, interrupted ones resume from their checkpoint.",
        epilog="examples:\n  fedpd sweep examples/fedavg.toml examples/fedpd.toml --seeds 1-4 --out "
        "runs/table\n  fedpd sweep examples/fedpd.toml --seeds 1,2 --set algorithm.p=0.3 --jobs 2\n"
        "  fedpd sweep examples/fedavg.toml --seeds 1-3 --grid solver.lr=1,0.3 --select train_loss:last3"
        "\n  fedpd sweep "
        "examples/fedpd.toml --seeds 1-8 --ray 10.0.0.5:6379 --cpus-per-run 2\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sw.add_argument("configs", nargs="+", metavar="CONFIG", help="TOML config files")
    sw.add_argument("--seeds", metavar="LIST", help="seeds, e.g. 1,2,3 or 1-4: the values of run.seed, or of the keys "
                    "--vary names (default: each config's own run.seed)")
    sw.add_argument("--out", metavar="DIR", help="where the run directories go (default runs/sweep-<time>)")
    sw.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                    help="override a value in every config, TOML syntax (repeatable)")
    sw.add_argument("--unset", action="append", metavar="SECTION.KEY", help=UNSET_HELP)
    sw.add_argument("--vary", action="append", metavar="KEY[,KEY]",
                    help="the seed keys each --seeds value sets (default run.seed; run.seed,problem.seed: each seed "
                    "its own data split and initial model too)")
    sw.add_argument("--grid", action="append", metavar="SECTION.KEY=V1,V2,...",
                    help="run every value of KEY (repeatable: every combination), in OUT/<config>/<key=value>/s<seed>; "
                    "a config that does not take KEY is not varied by it")
    sw.add_argument("--select", metavar="METRIC[:lastK][:max|:min]",
                    help="choose each config's grid value by the mean of METRIC over a run's last K evaluations, "
                    "averaged over the seeds (e.g. test_acc:last5, maximised; train_loss:last5, minimised)")
    sw.add_argument("--no-group", action="store_true", help=NO_GROUP_HELP)
    sw.add_argument("--jobs", type=int, metavar="N", help="runs at once (default: the CPU cores available)")
    from fedpd.reproduce.cluster import add_cluster_options

    add_cluster_options(sw)
    sw.add_argument("--quiet", action="store_true", help="no progress output and no table (--format csv, json or "
                    "markdown still prints the table)")
    _format_option(sw)
    sw.set_defaults(func=_cmd_sweep)

    dm = sub.add_parser("demo", help="FedPD Fig. 2(b): FedAvg, FedProx, FedPD (p = 0, 0.5) on strongly non-iid data",
                        description="Four runs of FedPD's Fig. 2(b) (strongly non-i.i.d. penalised logistic "
                        "regression, 100 clients): a table and grad_norm_sq.png in the demo's directory.")
    dm.add_argument("--out", metavar="DIR", help="where to write the runs and the figure (default runs/demo-<time>)")
    dm.add_argument("--rounds", type=int, default=600, help="rounds per run (default 600)")
    dm.add_argument("--overwrite", action="store_true", help="replace the demo runs already in --out")
    dm.add_argument("--threads", type=int, metavar="N", help="CPU threads (run.threads; default automatic)")
    dm.add_argument("--quiet", action="store_true", help="no progress output")
    _format_option(dm, "; then the other lines go to stderr")
    dm.set_defaults(func=_cmd_demo)

    fl = sub.add_parser("flower", help="deploy on Flower: write a run's Flower app, or TLS certificates and node keys",
                        description="Helpers for running fedpd on a Flower SuperLink and SuperNodes "
                        "(docs/deployment.md). Simulation needs none of this: fedpd run --set run.engine=flower.")
    flsub = fl.add_subparsers(dest="flower_command", required=True, parser_class=_Parser)
    fa = flsub.add_parser("app", help="write the Flower app that runs a config (for: flwr run APPDIR CONNECTION)")
    fa.add_argument("config", help="TOML config file of the run")
    fa.add_argument("--out", required=True, metavar="APPDIR", help="the app directory to write")
    fa.add_argument("--run-dir", metavar="DIR", help="run directory on the server machine (default runs/<config>)")
    fa.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)")
    fa.add_argument("--unset", action="append", metavar="SECTION.KEY", help=UNSET_HELP)
    fa.add_argument("--overwrite", action="store_true", help="replace an app already in APPDIR")
    fa.set_defaults(func=_cmd_flower_app)
    fc = flsub.add_parser("certs", help="a CA, the SuperLink's TLS certificate and SuperNode key pairs")
    fc.add_argument("dir", help="folder to write ca.crt, server.crt, server.key, node<k>, node<k>.pub into")
    fc.add_argument("--nodes", type=int, default=2, help="SuperNode key pairs to make (default 2; 1 or more)")
    fc.add_argument("--overwrite", action="store_true", help="replace certificates and keys already in DIR (the "
                    "SuperLink and SuperNodes must then use the new ones, and node keys be registered again)")
    fc.add_argument("--host", action="append", default=[], metavar="NAME",
                    help="the SuperLink's host name or IP as SuperNodes reach it (repeatable; localhost, "
                    "127.0.0.1 and ::1 are always in the certificate)")
    fc.set_defaults(func=_cmd_flower_certs)
    fn = flsub.add_parser("connection", help="add a SuperLink connection to flwr's config ($FLWR_HOME/config.toml)")
    fn.add_argument("name", help="the connection's name (flwr run APPDIR NAME)")
    fn.add_argument("--address", required=True, metavar="HOST:PORT", help="the SuperLink's address")
    fn.add_argument("--root-certificates", metavar="CA_FILE", help="the CA certificate (TLS), e.g. ca.crt")
    fn.add_argument("--insecure", action="store_true", help="plain HTTP (tests on one machine only)")
    fn.add_argument("--default", action="store_true", help="make it flwr's default connection")
    fn.add_argument("--wait", type=float, metavar="SECONDS",
                    help="then wait up to SECONDS for the SuperLink to answer at --address (a script that has just "
                    "started it in the background, before flwr supernode register or flwr run)")
    fn.set_defaults(func=_cmd_flower_connection)
    fw = flsub.add_parser("clientapp", help="a warm ClientApp beside a SuperNode started with --isolation process: "
                          "one process serves every message (docs/deployment.md)")
    fw.add_argument("--runtime-api-address", required=True, metavar="HOST:PORT",
                    help="the SuperNode's Runtime API: 127.0.0.1 and the SuperNode's --port")
    fw.add_argument("--insecure", action="store_true", help="plain HTTP to the SuperNode (as Flower's default)")
    fw.add_argument("--root-certificates", metavar="CA_FILE", help="the CA of the SuperNode's --ssl-certfile (TLS)")
    fw.set_defaults(func=_cmd_flower_clientapp)

    try:
        from fedpd.data.cli import add_data_parser
    except ImportError:  # pragma: no cover
        pass
    else:
        add_data_parser(sub)
    from fedpd.reproduce.cli import add_reproduce_parser

    add_reproduce_parser(sub)
    return p


def _format_option(parser, more: str = "") -> None:
    """``--format``: the command's table fitted to the terminal, or whole for other programs
    (the choices are :data:`fedpd.results.tables.FORMATS`, not imported here: the CLI starts fast)."""
    parser.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"),
                        help="table (default: fitted to the terminal, the least important columns left out and "
                        f"named), or csv, json, markdown: every column, nothing else on stdout{more}")


def _cmd_flower_app(args) -> int:
    from pathlib import Path

    from fedpd.config import load_config
    from fedpd.flower.deploy import write_app

    try:
        cfg = load_config(args.config, _overrides(args))
    except FedpdError as err:
        raise _unknown_key_hint(err, args) from None
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
    appdir = write_app(cfg, Path(args.out), run_dir, overwrite=args.overwrite)
    print(f"wrote {appdir}/pyproject.toml (run directory on the server: {run_dir.absolute()})\n"
          f"run it with: flwr run {appdir} <connection> --stream")
    return 0


def _cmd_flower_connection(args) -> int:
    from fedpd.flower.deploy import wait_for_superlink, write_connection

    if args.insecure and args.root_certificates:
        raise FedpdError("fedpd flower connection: give --root-certificates or --insecure, not both")
    if args.wait is not None and args.wait < 0:
        raise FedpdError(f"fedpd flower connection: --wait {args.wait:g} (allowed: 0 or more seconds)")
    path = write_connection(args.name, args.address, args.root_certificates, args.insecure, args.default)
    print(f"wrote connection {args.name!r} ({args.address}) into {path}")
    if args.wait is not None:
        waited = wait_for_superlink(args.address, args.wait, args.root_certificates)
        print(f"the SuperLink at {args.address} answers (after {waited:.1f} s)")
    return 0


def _cmd_flower_clientapp(args) -> int:
    from fedpd.flower import require_flower

    if args.insecure == bool(args.root_certificates):
        raise FedpdError("fedpd flower clientapp: give --insecure (the SuperNode's default) or --root-certificates "
                         "CA_FILE (a SuperNode started with --ssl-certfile), one of them")
    host, _, port = args.runtime_api_address.rpartition(":")
    if not host or not port.isdigit():
        raise FedpdError(f"--runtime-api-address {args.runtime_api_address!r}: expected HOST:PORT of the SuperNode's "
                         f"Runtime API (its --port), e.g. 127.0.0.1:9094")
    if args.root_certificates and not Path(args.root_certificates).is_file():
        raise FedpdError(f"--root-certificates {args.root_certificates!r}: no such file")
    require_flower()
    from fedpd.flower.warm import serve

    serve(args.runtime_api_address, args.root_certificates)
    return 0


def _cmd_flower_certs(args) -> int:
    from fedpd.flower.deploy import make_certificates

    paths = make_certificates(args.dir, nodes=args.nodes, hosts=tuple(args.host), overwrite=args.overwrite)
    print(f"wrote {', '.join(sorted(p.name for p in paths.values()))} into {args.dir}\n"
          f"keep ca.key and the node keys private; SuperNodes need ca.crt and their own node<k> key")
    return 0


#: commands that compute (a closed output stops none of them: the rest of the output is dropped)
_WORKING = ("run", "sweep", "demo", "reproduce")


class _ReaderSafe:
    """stdout or stderr as a command writes it: when the reader of a pipe leaves (``fedpd run |
    grep -m1 round``), what follows is dropped — the file descriptor is pointed at the null
    device, so neither the command nor Python's exit sees a broken pipe — and the command goes on
    to its end. ``left`` says whether that happened."""

    def __init__(self, inner):
        self._inner, self.left = inner, False

    def _drop(self) -> None:
        import os

        self.left = True
        try:
            fd = self._inner.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (pytest's capture): nothing to point
            return
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
        try:
            self._inner.flush()  # what the buffer held goes to the null device
        except (OSError, ValueError):
            pass

    def write(self, text):
        if self.left:
            return len(text)
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self):
        if self.left:
            return
        try:
            self._inner.flush()
        except BrokenPipeError:
            self._drop()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _notices(show):
    """``warnings.showwarning`` that prints fedpd's notices as one line each."""
    from fedpd.checks import FedpdNotice

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, FedpdNotice):
            print(f"fedpd: note: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def main(argv: list[str] | None = None) -> int:
    import warnings

    from fedpd.checks import NonFiniteMetrics

    _CURRENT.update(dir=None, demo=None, command=None)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, _ = _ReaderSafe(sys.stdout), _ReaderSafe(sys.stderr)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _notices(warnings.showwarning)
            code = _main(argv, NonFiniteMetrics)
        command = _CURRENT.get("command")
        if out.left and command in _WORKING:  # the command ran to its end; say what the reader missed
            print(f"fedpd: note: the reader of stdout left before fedpd {command} ended; it ran to its end "
                  f"(exit status {code}) and the rest of stdout was dropped", file=sys.stderr)
        return code
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv, NonFiniteMetrics) -> int:
    try:
        parser = make_parser()
        args = parser.parse_args(argv)
        args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # as typed: what a report records
        _CURRENT["command"] = args.command
        if args.command is None:  # bare `fedpd`: what it can do
            parser.print_help()
            return 0
        return args.func(args)
    except NonFiniteMetrics as err:
        print(f"fedpd: error: {err}", file=sys.stderr)
        return err.exit_code
    except FedpdError as err:
        print(f"{getattr(err, 'prog', 'fedpd')}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_interrupted(), file=sys.stderr)
        return 130
    except OSError as err:  # a path that cannot be created, read or written
        where = f"{err.filename}: " if err.filename else ""
        print(f"fedpd: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except SystemExit as exit:  # --help, --version
        return exit.code if isinstance(exit.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
