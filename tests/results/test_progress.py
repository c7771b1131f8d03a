"""Progress output: a rich bar on a terminal that keeps the bar, the round and the time left
visible at 80 columns; plain lines elsewhere (logs, CI)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from fedpd.progress import Progress, summary

METRICS = {"round": 300, "train_loss": 0.693147, "grad_norm_sq": 1.234e-05, "test_acc": 0.5287, "comm_rounds": 313}


def test_rich_bar_at_80_columns_keeps_bar_round_and_time_left():
    out = io.StringIO()
    bar = Progress(600, label="fedpd-gd-p0.5 ", console=Console(width=80, force_terminal=True, file=out))
    for r in range(1, 301):
        bar.update(r, METRICS if r == 300 else None)
    bar.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # strip the terminal's escape codes
    line = [s for s in text.replace("\r", "\n").splitlines() if s.strip()][-1].rstrip()  # the last frame
    assert len(line) <= 80
    assert "fedpd-gd-p0.5" in line and "300/600" in line and "━" in line  # label, round, bar
    assert re.search(r"\d+:\d\d:\d\d|-:--:--", line), line  # time left
    assert "train_loss=0.6931" in line and line.endswith("…")  # metrics: what fits, cut visibly


def test_rich_bar_shows_every_metric_when_wide():
    out = io.StringIO()
    bar = Progress(600, console=Console(width=200, force_terminal=True, file=out))
    bar.update(300, METRICS)
    bar.close()
    assert summary(METRICS) in out.getvalue()


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()  # isatty() is False
    bar = Progress(20, start=10, label="run ", stream=out)
    bar.update(11)  # no new metrics: nothing printed
    bar.update(15, METRICS)
    bar.close()
    resumed, *lines = out.getvalue().splitlines()
    assert resumed == "run continuing from round 10 (the last checkpoint) to round 20"  # start > 0: a resume
    assert len(lines) == 1 and "\x1b" not in lines[0]
    assert lines[0].startswith("run round 15/20  train_loss=0.6931  grad_norm_sq=1.234e-05")
    assert re.search(r"~\d+s left\]$", lines[0])


def test_disabled_prints_nothing():
    out = io.StringIO()
    bar = Progress(5, enabled=False, stream=out, console=Console(file=out, force_terminal=True))
    bar.update(5, METRICS)
    bar.close()
    assert out.getvalue() == ""


def test_progress_lines_show_backdoor_accuracy():
    line = summary({"train_loss": 0.5, "test_acc": 0.9, "backdoor_acc": 0.25, "comm_rounds": 3})
    assert line == "train_loss=0.5  test_acc=0.9  backdoor_acc=0.25  comm_rounds=3"
