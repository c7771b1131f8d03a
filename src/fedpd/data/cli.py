"""The ``fedpd data`` sub-command: ``list`` what is in the data directory, ``download`` a dataset,
``split`` one into clients and show (or plot) the label distribution.

``add_data_parser(subparsers)`` registers it on the main CLI's argparse sub-parsers; every leaf parser sets
``func=(args) -> int``. Errors are raised as FedpdError subclasses for the main CLI to print.
The loaders are imported by the commands, not here: building the parser stays light.
"""

from __future__ import annotations

import argparse
import os
import shutil
import textwrap
from pathlib import Path

import numpy as np

from fedpd.data.partition import PARTITIONS, format_label_matrix, label_matrix, partition
from fedpd.errors import ConfigError


def add_data_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``data {list,download,split}`` to ``subparsers`` (from ``ArgumentParser.add_subparsers()``)."""
    p = subparsers.add_parser("data", help="list, download and split datasets",
                              description="Datasets: list what is present, download, split into clients.")
    sub = p.add_subparsers(dest="data_command", metavar="{list,download,split}")
    sub.required = True

    def data_dir(q):
        q.add_argument(
            "--data-dir", metavar="D", help="data directory (default: $FEDPD_DATA, else ~/.cache/fedpd/data)"
        )

    q = sub.add_parser("list", help="show each known dataset: present, missing or corrupt, and where")
    data_dir(q)
    q.add_argument("--verify", action="store_true",
                   help="also hash canonical files and read extracted CIFAR batches (default: sizes only)")
    q.set_defaults(func=cmd_list)

    q = sub.add_parser(
        "download", help="fetch a dataset's canonical archives (mnist, fashion-mnist, cifar10, cifar100)"
    )
    q.add_argument("name", metavar="NAME", help="dataset: mnist, fashion-mnist, cifar10 or cifar100")
    data_dir(q)
    q.add_argument("--base-url", metavar="URL", help="fetch from URL/<file> instead of the public mirrors")
    q.add_argument("--no-progress", action="store_true", help="print nothing while downloading")
    q.set_defaults(func=cmd_download)

    q = sub.add_parser("split", help="partition a dataset's training set into clients and show the label matrix")
    q.add_argument("name", metavar="NAME", help="dataset (fedpd data list)")
    q.add_argument("--partition", choices=PARTITIONS, default="iid", help="how to split (default iid)")
    q.add_argument("--clients", type=int, metavar="N", help="number of clients (not used by natural)")
    q.add_argument("--alpha", type=float, default=0.5, metavar="A", help="Dirichlet concentration (default 0.5)")
    q.add_argument(
        "--classes-per-client",
        type=int,
        default=2,
        metavar="C",
        help="shards or label_power_law: labels per client (default 2)",
    )
    q.add_argument("--min-size", type=int, default=1, metavar="M", help="minimum samples per client (default 1)")
    q.add_argument("--balanced", action="store_true",
                   help="dirichlet only: every client the same number of samples, its label mix ~ Dir(alpha)")
    q.add_argument("--exponent", type=float, default=1.5, help="power_law Pareto exponent (default 1.5)")
    q.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the partition (default 0)")
    data_dir(q)
    q.add_argument(
        "--path",
        metavar="P",
        help="image-folder: folder or .tar.gz; csv, npz: the file (absolute, relative "
        "to the working directory, or under the data dir)",
    )
    q.add_argument("--label-column", metavar="COL", help="csv only: the column of the labels (default label)")
    q.add_argument(
        "--label-mode", choices=("fine", "coarse"), help="cifar100 only: 100 fine (default) or 20 coarse labels"
    )
    q.add_argument("--no-verify", action="store_true", help="skip the canonical size/hash check of dataset files")
    q.add_argument("--plot", metavar="FILE.png", help="also draw the label matrix as a heatmap (needs matplotlib)")
    q.set_defaults(func=cmd_split)
    return p


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root)) or "."
    except ValueError:
        return str(path)


def cmd_list(args) -> int:
    from fedpd.data.loaders import DATASETS, dataset_status, resolve_data_dir

    root = resolve_data_dir(args.data_dir)
    origin = "--data-dir" if args.data_dir else "$FEDPD_DATA" if os.environ.get("FEDPD_DATA") else "default cache dir"
    print(f"data dir: {root} ({origin})")
    rows = []
    for name in DATASETS:
        st = dataset_status(name, root, verify=args.verify)
        if st.state == "missing":
            where = "looked in " + ", ".join(_rel(p, root) for p in st.looked)
        elif st.state == "corrupt":
            where = st.detail
        elif st.state == "n/a":
            where = f"give a path: fedpd data split {name} --path P"
        else:
            where = _rel(Path(st.where), root)
        rows.append((name, st.state, where))
    for name, (value, origin) in installed_loaders().items():  # a distribution's loaders (entry points)
        rows.append((name, "plug-in", f"{value} ({origin})"))
    w = max(len(r[0]) for r in rows)
    print(f"{'dataset':<{w}}  {'state':<8} where")
    indent = " " * (w + 11)  # the where column, wrapped within the terminal's width
    width = max(len(indent) + 20, shutil.get_terminal_size((80, 24)).columns)
    for name, state, where in rows:
        print(textwrap.fill(where, width, initial_indent=f"{name:<{w}}  {state:<8} ", subsequent_indent=indent,
                            break_on_hyphens=False, break_long_words=False))
    return 0


def installed_loaders() -> dict[str, tuple[str, str]]:
    """name -> (import path, where it comes from) of the dataset loaders installed distributions
    declare (entry points ``dataset.<name>`` of ``fedpd.plugins``)."""
    from fedpd import names, plugins
    from fedpd.data.loaders.user import KIND

    plugins.search(plugins.default_path())
    return {name: (ep.value, f"entry point of {plugins.dist(ep)}") for name, ep in names.entry_points(KIND).items()}


def cmd_download(args) -> int:
    from fedpd.data.download import download
    from fedpd.data.loaders import canonical_name

    folder = download(args.name, args.data_dir, base_url=args.base_url, progress=not args.no_progress)
    print(f"{canonical_name(args.name)}: files in {folder}")
    return 0


#: class names of the datasets whose files carry none (the order of their labels)
CLASS_NAMES = {
    "mnist": [str(i) for i in range(10)],
    "fashion-mnist": ["T-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                      "ankle boot"],
    "femnist": [*"0123456789", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"abcdefghijklmnopqrstuvwxyz"],
    "sent140": ["negative", "positive"],
}


def known_class_names(dataset: str) -> list[str] | None:
    """The class names of ``dataset`` when its files carry none (MNIST, Fashion-MNIST, FEMNIST, Sent140)."""
    return CLASS_NAMES.get(dataset)


def label_matrix_figure(matrix: np.ndarray, title: str, class_names: list[str] | None = None):
    """The clients × classes label counts of a split as a heatmap Figure. Every class gets a tick
    (named by ``class_names`` when given) up to 40 classes; clients are numbered from 0."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib (or 'fedpd[plot]')"
        ) from None
    k, c = matrix.shape
    names = list(class_names) if class_names is not None and len(class_names) == c else [str(i) for i in range(c)]
    long_names = max((len(n) for n in names), default=1) > 3
    fig = Figure(figsize=(min(14.0, max(4.5, 3.5 + (0.45 if long_names else 0.3) * c)), min(8.0, 2.8 + 0.22 * k)))
    ax = fig.add_subplot()
    im = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="training samples")
    if c <= 40:
        ax.set_xticks(range(c))
        ax.set_xticklabels(names, rotation=45 if long_names else 0, ha="right" if long_names else "center",
                           fontsize="small" if c > 12 else "medium")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title)
    return fig


def plot_label_matrix(matrix: np.ndarray, path, title: str, class_names: list[str] | None = None) -> None:
    """:func:`label_matrix_figure` written to ``path`` (`fedpd data split --plot`, `fedpd plot RUN
    --split`): a file name or a binary file object."""
    fig = label_matrix_figure(matrix, title, class_names)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except (OSError, ValueError) as e:
        raise ConfigError(f"--plot {path}: cannot write the figure ({e})") from None


def _load_for_split(args):
    """(the dataset's key, the dataset) of ``fedpd data split NAME``: one of fedpd's, an installed
    loader (entry point) or a loader's import path."""
    from fedpd.data.loaders import canonical_name, dataset_options
    from fedpd.data.loaders.user import load_user_dataset

    if args.name in installed_loaders() or ":" in args.name:
        for option, given in (("--path", args.path), ("--label-mode", args.label_mode),
                              ("--label-column", args.label_column)):
            if given:
                raise ConfigError(f"{option}: not an option of a loader's dataset ({args.name} returns its arrays "
                                  f"itself)")
        return args.name, load_user_dataset(args.name)
    key = canonical_name(args.name)
    options = {}
    if "verify" in dataset_options(key):
        options["verify"] = not args.no_verify
    if "path" in dataset_options(key):
        options["path"] = args.path
    elif args.path:
        raise ConfigError(f"--path: not an option of {key} (allowed: image-folder, csv, npz)")
    if "seed" in dataset_options(key):
        options["seed"] = args.seed  # a table's holdout: the rows a run with problem.seed = S trains on
    for option, value, only in (("label_mode", args.label_mode, "cifar100"),
                                ("label_column", args.label_column, "csv")):
        if value:
            if option not in dataset_options(key):
                raise ConfigError(f"--{option.replace('_', '-')}: only for {only}, not {key}")
            options[option] = value
    from fedpd.data.download import load_or_say_how

    return key, load_or_say_how(key, args.data_dir, **options)


def cmd_split(args) -> int:
    key, ds = _load_for_split(args)
    labels = ds.y_train.numpy()
    parts = partition(args.partition, labels, args.clients, args.seed, alpha=args.alpha,
                      classes_per_client=args.classes_per_client, min_size=args.min_size, exponent=args.exponent,
                      balanced=args.balanced, user_ids=None if ds.train_users is None else ds.train_users.numpy())
    if args.partition == "natural" and args.clients is not None and args.clients != len(parts):
        print(f"note: natural partition has one client per user ({len(parts)}); --clients {args.clients} ignored")
    matrix = label_matrix(labels, parts, ds.num_classes)
    print(f"{ds.name}: {args.partition} partition of {len(labels)} training samples (seed {args.seed})")
    print(format_label_matrix(matrix))
    if ds.classes and len(ds.classes) <= 20:
        print("classes: " + ", ".join(f"{i} {c}" for i, c in enumerate(ds.classes)))
    if args.plot:
        plot_label_matrix(matrix, args.plot, f"{ds.name}: {args.partition}, {len(parts)} clients",
                          ds.classes or known_class_names(key))
        print(f"plot: {args.plot}")
    return 0
