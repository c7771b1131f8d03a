"""Plots a researcher can put in a paper: several metrics, log or linear axes
chosen sensibly, axis labels in words and maths, legends that tell runs apart, mean ± std bands
over seeds, class names on the split heatmap."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install 'fedpd[plot]')")

from matplotlib.collections import PolyCollection  # noqa: E402

from fedpd.results.figures import runs_figure  # noqa: E402
from fedpd.results.runs import X_AXES
from helpers import quick_run
from helpers import run_cli as cli  # noqa: E402

SMALL = """
[problem]
name = "synthetic"
clients = 6
max_client_samples = 60
[algorithm]
name = "fedavg"
[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 5
[sampler]
name = "uniform"
clients_per_round = 3
[run]
rounds = 6
eval_every = 2
"""


def make_run(tmp_path: Path, out: Path, capsys, *overrides: str) -> Path:
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL)
    args = ["run", cfg, "--out", out, "--quiet"]
    for o in overrides:
        args += ["--set", o]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    return out


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def runs(tmp_path, capsys) -> list[Path]:
    return [make_run(tmp_path, tmp_path / "fedavg", capsys),
            make_run(tmp_path, tmp_path / "scaffold", capsys, "algorithm.name=scaffold")]


def legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_several_metrics_one_panel_each(runs, tmp_path, capsys):
    out = tmp_path / "fig.pdf"
    code, stdout, err = cli(["plot", *runs, "--metric", "grad_norm_sq,train_loss", "--metric", "test_acc",
                             "--x", "comm_rounds", "-o", out], capsys)
    assert code == 0, err
    assert out.read_bytes().startswith(b"%PDF") and str(out) in stdout
    fig = runs_figure(runs, ["grad_norm_sq,train_loss", "test_acc"], x="comm_rounds")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3
    assert [ax.get_ylabel() for ax in axes] == [r"stationarity gap $\|\nabla f(x)\|^2$", r"training loss $f(x)$",
                                                "test accuracy"]
    assert all(ax.get_xlabel() == "communication rounds" for ax in axes)
    assert [len(ax.get_lines()) for ax in axes] == [2, 2, 2]


def test_axis_scale_automatic_and_forced(runs, tmp_path, capsys):
    fig = runs_figure(runs, "grad_norm_sq,test_acc", x="uplink_floats")
    grad, acc = fig.axes[:2]
    assert grad.get_yscale() == "log"  # ‖∇f‖²: a log axis for every run, whatever its range
    assert acc.get_yscale() == "linear"
    assert grad.get_xlabel() == "floats uploaded (all clients)"
    assert runs_figure(runs, "grad_norm_sq", yscale="linear").axes[0].get_yscale() == "linear"
    assert runs_figure(runs, "test_acc", yscale="log").axes[0].get_yscale() == "log"
    for flag, name in (("--logy", "log.png"), ("--linear", "lin.svg")):
        code, _, err = cli(["plot", *runs, "--metric", "train_loss", flag, "-o", tmp_path / name], capsys)
        assert code == 0 and (tmp_path / name).stat().st_size > 1000, err
    code, _, err = cli(["plot", *runs, "--metric", "train_loss", "--logy", "--linear", "-o", tmp_path / "x.png"],
                       capsys)
    assert code == 2 and "not allowed with" in err and len(err.strip().splitlines()) == 1


def test_legend_tells_apart_runs_with_one_folder_name(tmp_path, capsys):
    a = make_run(tmp_path, tmp_path / "sweep-a" / "fedavg", capsys, "solver.lr=0.05")
    b = make_run(tmp_path, tmp_path / "sweep-b" / "fedavg", capsys, "solver.lr=0.1")
    assert legend(runs_figure([a, b], "train_loss").axes[0]) == ["fedavg (lr=0.05)", "fedavg (lr=0.1)"]
    c = make_run(tmp_path, tmp_path / "copy" / "fedavg", capsys, "solver.lr=0.05")  # same config as a
    labels = legend(runs_figure([a, c], "train_loss", group=False).axes[0])
    assert labels == ["sweep-a/fedavg", "copy/fedavg"]
    code, _, err = cli(["plot", a, b, c, "--metric", "train_loss", "--no-group", "-o", tmp_path / "p.png"], capsys)
    assert code == 0, err


def test_seeds_of_one_config_become_mean_and_std_band(tmp_path, capsys):
    seeds = [make_run(tmp_path, tmp_path / f"fedavg-s{s}", capsys, f"run.seed={s}") for s in range(3)]
    other = make_run(tmp_path, tmp_path / "scaffold", capsys, "algorithm.name=scaffold")
    fig = runs_figure([*seeds, other], "train_loss")
    ax = fig.axes[0]
    assert legend(ax) == ["fedavg (mean ± std, 3 seeds)", "scaffold"]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    values = np.array([[r["train_loss"] for r in records(p)] for p in seeds])
    mean_line = ax.get_lines()[0]
    np.testing.assert_allclose(mean_line.get_ydata(), values.mean(0))
    np.testing.assert_allclose(mean_line.get_xdata(), [r["round"] for r in records(seeds[0])])
    assert values.std(0).max() > 0  # the seeds differ: the band has a width
    top = bands[0].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx((values.mean(0) + values.std(0)).max())
    separate = runs_figure(seeds, "train_loss", group=False).axes[0]
    assert len(separate.get_lines()) == 3 and not separate.collections
    code, _, err = cli(["plot", *seeds, "--metric", "train_loss", "-o", tmp_path / "band.png"], capsys)
    assert code == 0, err


def test_caption_and_title(runs):
    fig = runs_figure(runs, "train_loss", title="T", caption="why the curve hovers " * 20)
    texts = [t.get_text() for t in fig.texts]
    assert any(t.startswith("why the curve hovers") and "\n" in t for t in texts)  # wrapped under the axes
    assert fig._suptitle.get_text() == "T"


def test_split_heatmap_has_a_tick_per_class_with_its_name(tmp_path, capsys):
    from fedpd.data.cli import label_matrix_figure
    from fedpd.results.figures import class_names

    class P:  # a problem of Fashion-MNIST: its files carry no names, fedpd knows them
        info = {"dataset": "fashion-mnist"}

    names = class_names(P, list(range(10)))
    assert names[0] == "T-shirt/top" and names[9] == "ankle boot"
    fig = label_matrix_figure(np.arange(30).reshape(3, 10), "t", names)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    assert list(ax.get_xticks()) == list(range(10))

    class Q:
        info = {}

    assert class_names(Q, [-1.0, 1.0]) == ["-1", "+1"]
    run = make_run(tmp_path, tmp_path / "r", capsys)
    code, _, err = cli(["plot", run, "--split", "-o", tmp_path / "split.png"], capsys)
    assert code == 0 and (tmp_path / "split.png").read_bytes()[:4] == b"\x89PNG", err


def test_every_metric_label_fits_its_panel(tmp_path):
    """`fedpd plot --metric backdoor_acc` cut its label (67 characters) at both ends: a long label
    now breaks into lines, each panel's label within the panel's height — alone, and every long
    label in one figure of panels in two columns (each row as tall as any figure's)."""
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install 'fedpd[plot]')")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from fedpd.results.figures import LABELS, Y_LABEL_CHARS, runs_figure

    keys = [k for k, label in LABELS.items() if k not in X_AXES and len(label) > Y_LABEL_CHARS]  # the wrapped ones
    assert "backdoor_acc" in keys and "personal_acc_worst10" in keys
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"round": r, "comm_rounds": r, **{k: 0.1 * r + 0.01 for k in keys}}) + "\n" for r in range(4)))
    for metrics in (["backdoor_acc"], keys):
        fig = runs_figure([run], metrics)
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.canvas.draw()
        for ax in fig.axes[:len(metrics)]:
            label, panel = ax.yaxis.label.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert label.height <= panel.height and 0 <= label.y0 and label.y1 <= fig.bbox.height, ax.get_ylabel()


def test_plot_draws_duplicate_runs_once_and_says_so(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from fedpd.results.figures import runs_figure

    quick_run(tmp_path / "s0", capsys)
    quick_run(tmp_path / "s0-copy", capsys)  # the same config and seed: a duplicate, not a second seed
    quick_run(tmp_path / "s1", capsys, "--set", "run.seed=1")
    with pytest.warns(UserWarning, match="same config and seed: duplicates, drawn once"):
        fig = runs_figure([tmp_path / "s0", tmp_path / "s0-copy", tmp_path / "s1"], "train_loss")
    [legend] = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert "2 seeds" in legend
