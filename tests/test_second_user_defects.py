"""What a second new user tripped over (issue 46): compare's columns and progress lines, the
personalised metrics' test split, the fedplus_mnist data hint, the backdoor plot's label."""

from __future__ import annotations

import csv
import io
import json

import pytest

import fedpd
from fedpd.progress import summary
from fedpd.results.runs import X_AXES
from helpers import run_cli as cli

TINY = {"problem": {"name": "synthetic", "clients": 6, "max_client_samples": 40},
        "solver": {"name": "sgd", "lr": 0.1, "local_steps": 2, "batch_size": 8},
        "run": {"rounds": 2, "eval_every": 1}}


# --- 2: compare shows every metric, and names the aggregator, the attack and privacy ------------
@pytest.fixture
def backdoor_runs(tmp_path):
    """FedAvg under a backdoor, once with the plain mean and once with norm bounding, and a
    private FedAvg without an attack: three runs whose algorithm is fedavg."""
    attack = {"name": "backdoor", "parties": [0], "target": 1, "poison_fraction": 0.5}
    for name, algorithm, more in [
            ("mean", {"name": "fedavg"}, {"attack": attack}),
            ("bounded", {"name": "fedavg", "aggregator": "norm_bounding",
                         "aggregator_options": {"max_norm": 0.5}}, {"attack": attack}),
            ("private", {"name": "fedavg"}, {"privacy": {"clip": "fixed", "noise_multiplier": 0.5}})]:
        fedpd.run({**TINY, "algorithm": algorithm, **more}, tmp_path / name)
    return [tmp_path / n for n in ("mean", "bounded", "private")]


def test_compare_csv_holds_every_recorded_metric_and_names_aggregator_attack_and_privacy(backdoor_runs, capsys):
    code, out, _ = cli(["compare", *map(str, backdoor_runs), "--format", "csv"], capsys)
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(out))}
    assert code == 0 and set(rows) == {"mean", "bounded", "private"}
    recorded = {k for p in backdoor_runs for line in open(p / "metrics.jsonl") for k in fedpd.io.json.loads(line)}
    assert "backdoor_acc" in recorded
    columns = set(next(iter(rows.values())))
    mechanism = {k for k in recorded if k.startswith("dp_") and k != "dp_epsilon"}  # settings: the privacy column
    assert mechanism and not mechanism & columns
    for key in recorded - {"round", "comm_rounds", "uplink_floats", "dp_epsilon"} - mechanism:
        assert key in columns or f"{key}_final" in columns, key
    assert {"backdoor_acc_final", "backdoor_acc_best", "rejected_uploads", "wall_s", "dp_epsilon"} <= columns
    assert [rows[n]["algorithm"] for n in ("mean", "bounded", "private")] == ["fedavg"] * 3
    assert (rows["mean"]["aggregator"], rows["bounded"]["aggregator"]) == ("-", "norm_bounding(max_norm=0.5)")
    assert (rows["mean"]["attack"], rows["private"]["attack"]) == ("backdoor 1 party", "-")
    assert (rows["mean"]["privacy"], rows["private"]["privacy"]) == ("-", "fixed clip, z=0.5, ε by RDP at δ=1e-05")
    assert rows["mean"]["backdoor_acc_final"] != "" and rows["private"]["backdoor_acc_final"] == ""


def test_compare_table_leads_with_backdoor_accuracy_and_a_plain_run_has_no_setting_columns(backdoor_runs, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli(["compare", *map(str, backdoor_runs[:2])], capsys)
    header = " ".join(out.splitlines()[:2])
    assert code == 0 and "backdoor acc" in header and "aggregator" in header and "attack" in header
    assert "privacy" not in header  # no run of these sets it
    monkeypatch.setenv("COLUMNS", "80")  # what is left out is named, a metric's final and best together
    code, out, _ = cli(["compare", *map(str, backdoor_runs[:2])], capsys)
    note = " ".join(out.split("left out at 80 columns:")[1].split())
    assert code == 0 and "test loss (final, best)" in note and "rejected uploads" in note, out
    assert "test acc" in " ".join(out.splitlines()[:2])  # an accuracy outranks the setting columns
    code, out, _ = cli(["compare", str(backdoor_runs[2]), "--format", "csv"], capsys)
    keys = next(csv.reader(io.StringIO(out)))
    assert "privacy" in keys and "aggregator" not in keys and "attack" not in keys


def test_progress_lines_show_backdoor_accuracy():
    line = summary({"train_loss": 0.5, "test_acc": 0.9, "backdoor_acc": 0.25, "comm_rounds": 3})
    assert line == "train_loss=0.5  test_acc=0.9  backdoor_acc=0.25  comm_rounds=3"


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
