"""Progress output: a rich progress bar on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time


def _fmt_time(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


#: what a progress or final line shows, in this order: personal metrics first where the run has
#: them (Fed+ and the personalised baselines: each client's own model on its own test data), then
#: the server model's
PERSONAL_KEYS = ("personal_acc", "personal_mse", "personal_loss")
GLOBAL_KEYS = ("train_loss", "grad_norm_sq", "test_acc", "backdoor_acc", "comm_rounds")
#: ``[system]``'s simulated time at which the model exists (fedpd.system), after the communication
TIME_KEYS = ("sim_time_s",)
#: [privacy]'s ε spent so far (at its delta), last on the line whatever the run
PRIVACY_KEYS = ("dp_epsilon",)


def _item(key: str, value) -> str:
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def summary(metrics: dict) -> str:
    """One line of the metrics that matter, and a private run's ε spent (``dp_epsilon``). For a
    personalised run (``personal_*`` metrics) the personal ones lead and the server model's follow
    after "server model:" (its loss is not what a personalised method minimises: a large
    ``train_loss`` there is not divergence)."""
    personal = [_item(k, metrics[k]) for k in PERSONAL_KEYS if metrics.get(k) is not None]
    shared = [_item(k, metrics[k]) for k in GLOBAL_KEYS + TIME_KEYS if metrics.get(k) is not None]
    private = [_item(k, metrics[k]) for k in PRIVACY_KEYS if metrics.get(k) is not None]
    if personal:
        comm = [s for s in shared if s.startswith(("comm_rounds=", "sim_time_s="))]
        server = [s for s in shared if not s.startswith(("comm_rounds=", "sim_time_s="))]
        return "  ".join(personal + comm + private + (["server model: " + "  ".join(server)] if server else []))
    return "  ".join(shared + private)


class Progress:
    """``update(round, metrics)`` after each round; ``metrics`` only when new ones exist.

    Draws a rich bar on ``console`` if given, else on ``stream`` (default stderr) when it is a
    terminal; otherwise prints a plain line per evaluation."""

    def __init__(self, total: int, start: int = 0, label: str = "", enabled: bool = True, stream=None, console=None):
        self.total, self.start, self.label, self.enabled = total, start, label, enabled
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.last = ""
        self._bar = None
        if enabled and (console is not None or self.stream.isatty()):
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn
            from rich.table import Column

            # the metrics take what the bar, round and time left leave, cut with an ellipsis
            metrics = TextColumn("{task.fields[info]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"))
            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                     TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(), metrics,
                                     console=console or Console(file=self.stream), expand=True, transient=False)
            self._task = self._bar.add_task(label or "rounds", total=total, completed=start, info="")
        if enabled and start > 0:  # a resumed run: say where it continues
            what = (f"continuing from round {start} (the last checkpoint) to round {total}" if start < total
                    else f"already at round {total} of {total}: nothing left to run")
            if self._bar is not None:
                self._bar.console.print(f"{label}{what}", markup=False, highlight=False)
            else:
                print(f"{label}{what}", file=self.stream, flush=True)
        if self._bar is not None:
            self._bar.start()

    def update(self, round: int, metrics: dict | None = None) -> None:
        if not self.enabled:
            return
        if metrics is not None:
            self.last = summary(metrics)
        if self._bar is not None:
            self._bar.update(self._task, completed=round, info=self.last)
        elif metrics is not None:
            done = round - self.start
            elapsed = time.perf_counter() - self.t0
            left = elapsed / done * (self.total - round) if done > 0 else 0.0
            print(
                f"{self.label}round {round}/{self.total}  {self.last}  [{_fmt_time(elapsed)}, ~{_fmt_time(left)} left]",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
