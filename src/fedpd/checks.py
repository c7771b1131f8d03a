"""Checks of a config against the problem it builds, before the first round, and of the metrics
while a run goes.

* :func:`check_against_problem`: options whose value is valid on its own but makes no sense for
  this problem (a minibatch larger than every client's data, an optional package a chosen
  feature needs) end with one :class:`ConfigError` line before anything is written.
* :func:`notices`: values that are allowed but probably not meant (a Bernoulli sampler that
  picks fewer than one client per round on average) are one warning line each
  (:class:`FedpdNotice`; the CLI prints ``fedpd: note: ...``), and the run goes on.
* :func:`check_finite`: a metric that became NaN or ±Inf stops the run with
  :class:`NonFiniteMetrics` (exit status 3 from the CLI) unless ``run.allow_nonfinite = true``.
* :func:`check_run_options_used`: a run option the user set that this run's engine would ignore
  (the disk store on nodes, a node timeout with nothing to wait for) is one :class:`ConfigError`
  line when the run starts.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

from fedpd.errors import ConfigError, FedpdError

#: the exit status of the CLI when a run's metrics became non-finite (2 is bad input)
NONFINITE_EXIT = 3


class NonFiniteMetrics(FedpdError):
    """A run's metrics became NaN or ±Inf (a diverged run). ``round``: where; ``keys``: which;
    ``history``: the metric records up to and including that evaluation; ``out_dir``: the run
    directory (or None)."""

    exit_code = NONFINITE_EXIT

    def __init__(self, message: str, round: int, keys: list[str], history: list[dict] | None = None, out_dir=None):
        super().__init__(message)
        self.round, self.keys, self.history, self.out_dir = round, keys, history or [], out_dir


def nonfinite_keys(record: dict) -> list[str]:
    """The metrics of ``record`` that are NaN or ±Inf (``wall_s`` aside)."""
    return [k for k, v in record.items()
            if k != "wall_s" and isinstance(v, float) and not math.isfinite(v)]


def check_finite(record: dict, history: list[dict] | None = None, out_dir=None, *,
                 allow_nonfinite: bool = False) -> None:
    """Raise :class:`NonFiniteMetrics` if a metric of ``record`` is NaN or ±Inf, unless the run
    allows it (``run.allow_nonfinite``)."""
    if allow_nonfinite:
        return
    bad = nonfinite_keys(record)
    if not bad:
        return
    values = ", ".join(f"{k} = {record[k]}" for k in bad[:4]) + (", ..." if len(bad) > 4 else "")
    where = ""
    if out_dir is not None:
        kept = "its last checkpoint, from before, is kept" if (Path(out_dir) / "checkpoint.pt").exists() \
            else "no checkpoint was written"
        where = f" (run directory {out_dir}; {kept})"
    raise NonFiniteMetrics(
        f"the run diverged: at round {record.get('round')} {values}{where}; it stopped there. "
        f"A smaller step size (solver.lr) usually helps; run.allow_nonfinite = true runs on regardless",
        record.get("round", 0), bad, history, out_dir)


#: algorithms whose batch_size means "at most every sample" by their definition (stochastic
#: Parallel SAGA draws min(B, n_i) rows of its gradient table without replacement)
TAKES_AT_MOST_ALL = ("stochastic_saga",)


def _largest_client(split) -> int:
    sizes = split.sizes
    return int(sizes.max()) if sizes.numel() else 0


def check_against_problem(cfg, problem, algorithm=None, *, participants: int | None = None) -> None:
    """Refuse option values that make no sense for ``problem``, before the first round
    (``participants``: the clients that train in a round, :func:`fedpd.build.expected_participants`;
    None: every client).

    ``batch_size`` (of the solver, or of an algorithm that draws its own minibatches with
    replacement) above the largest client's number of training samples is refused: minibatches
    are drawn with replacement, so such a batch only repeats samples, costing time and memory
    for nothing (``solver.name = "gd"`` takes every sample of every client). A batch above some
    clients' sizes but within the largest is fine."""
    largest = _largest_client(problem.train)
    for section in ("solver", "algorithm"):
        if section == "algorithm" and cfg.names["algorithm"] in TAKES_AT_MOST_ALL:
            continue
        batch = getattr(cfg.options[section], "batch_size", None)
        if batch is not None and largest and batch > largest:
            full = ', or solver.name = "gd" for full batches' if section == "solver" else ""
            raise ConfigError(f"{section}.batch_size: {batch} is larger than every client's training data "
                              f"(largest client: {largest} samples; allowed: 1..{largest}{full})")
    epochs = getattr(cfg.options["solver"], "local_epochs", 0)
    if epochs and largest:  # E·⌈n_k / B⌉ steps, bounded as local_steps is
        from fedpd.options import STEPS_MAX

        batch = cfg.options["solver"].batch_size
        steps = epochs * -(-largest // batch)
        if steps > STEPS_MAX:
            raise ConfigError(f"solver.local_epochs: {epochs} passes give the largest client ({largest} samples, "
                              f"batches of {batch}) {steps} local steps a round (allowed: at most {STEPS_MAX} steps, "
                              f"as solver.local_steps: local_epochs <= {STEPS_MAX // -(-largest // batch)} here)")
    n = problem.num_clients
    participants = n if participants is None else participants
    if cfg.run.eval_clients > n:
        raise ConfigError(f"run.eval_clients: {cfg.run.eval_clients} exceeds the problem's {n} clients (allowed: "
                          f"1..{n}, or 0 for every client)")
    if cfg.names["solver"] == "sgd":  # the draws of every local step's minibatch are made at once
        from fedpd.problems.lazy import check_memory

        solver = cfg.options["solver"]
        chunk = 1 if getattr(problem, "per_client", False) else min(participants, cfg.run.client_chunk or n)
        draws = 2 * 8 * chunk * solver.local_steps * solver.batch_size * problem.train.uniforms_per_sample
        check_memory("solver.local_steps", draws, f"the minibatch draws of a round ({solver.local_steps} local steps "
                     f"x {chunk} clients x {solver.batch_size} samples, made at once)")
    if cfg.names["solver"] == "exact":  # each chunk's Hessians H_i [chunk, d, d], and the solve's copies
        from fedpd.problems.lazy import check_memory

        chunk = min(participants, cfg.run.client_chunk or n)
        check_memory("problem.dim", 3 * 8 * chunk * problem.dim ** 2, f"the exact solver's Hessians ({chunk} clients "
                     f"x {problem.dim}^2)")
    if getattr(cfg.run, "tensorboard", False):
        from fedpd.tensorboard import require

        require()
    for message in notices(cfg, problem, algorithm):
        warnings.warn(message, FedpdNotice, stacklevel=3)


class FedpdNotice(UserWarning):
    """A value that is allowed but probably not what was meant; the CLI prints it as one line
    ``fedpd: note: ...`` on stderr and runs on."""


def notices(cfg, problem, algorithm=None) -> list[str]:
    """Values that are valid but look like a mistake for this problem (the run goes on)."""
    out = []
    n = problem.num_clients
    if cfg.names["sampler"] == "bernoulli" and cfg.options["sampler"].q * n < 1:
        q = cfg.options["sampler"].q
        out.append(f"sampler.q: {q:g} x {n} clients = {q * n:.2g} expected participants per round; most rounds "
                   f"will have none (nothing happens in them)")
    partition = problem.info.get("partition", "iid")
    if problem.info.get("pooled_test_slices") and partition != "iid" and personal_metrics(cfg, algorithm):
        out.append(f'problem.test: "pooled" with partition = "{partition}" deals the pooled test set i.i.d. over the '
                   f'clients, so personal_* metrics test each client on data unlike its own and say nothing about '
                   f'personalisation (allowed: problem.test = "per_client" for them)')
    return out


def personal_metrics(cfg, algorithm) -> bool:
    """Whether a run of ``cfg`` records personal_* metrics: the algorithm has personal models
    (it overrides ``personal_models``), or ``run.personal_eval = "always"``."""
    if cfg.run.personal_eval != "auto":
        return cfg.run.personal_eval == "always"
    from fedpd.algorithms.base import Algorithm

    return algorithm is not None and type(algorithm).personal_models is not Algorithm.personal_models


def check_run_options_used(run, transport=None, overrides=None, *, on_nodes: bool) -> None:
    """Refuse a ``[run]`` option (of the ``run`` options) the user set that this run would ignore
    (``on_nodes``: whether its clients live on nodes, :func:`fedpd.engines.in_process`):
    ``store = "disk"`` and ``store_dir`` where the clients' states live on nodes (they keep them in
    their own files), ``store_dir`` with the memory store, ``node_timeout`` where nothing waits
    (loopback nodes answer at once; one worker process is no worker), ``client_chunk`` with
    per-client execution (one client at a time).

    Checked where a run starts, not with the config: a resume continues its run's ``config.toml``,
    which states every option, and some hold what the run's first engine used (a disk store that a
    resume on loopback nodes reads the states from). So a fresh run checks what its config sets and a
    resume (``overrides``: its ``--set`` items) only what those set."""
    given = set(run.given(*type(run).model_fields))
    if overrides is not None:
        given &= {item.partition("=")[0].strip().removeprefix("run.") for item in overrides
                  if item.strip().startswith("run.")}
    engine = f'run.engine = "{run.engine}"' if transport is None else "a run on given nodes (a transport)"
    where = f"{engine} keeps the clients' states on its nodes, in their own files"
    if on_nodes and "store" in given and run.store == "disk":
        raise ConfigError(f'run.store: "disk" is the inprocess engine\'s client store; {where} (allowed: no run.store, '
                          f'or run.engine = "inprocess")')
    if on_nodes and "store_dir" in given:
        raise ConfigError(f"run.store_dir: the inprocess engine's disk store directory; {where} (allowed: no "
                          f"run.store_dir, or run.engine = \"inprocess\")")
    if not on_nodes and "store_dir" in given and run.store == "memory":
        raise ConfigError('run.store_dir: the disk store\'s directory, and run.store = "memory" keeps no files '
                          '(allowed: run.store = "disk" or "auto", or no run.store_dir)')
    if "node_timeout" in given and run.engine == "loopback" and transport is None:
        raise ConfigError("run.node_timeout: loopback nodes run in this process and answer at once, so there is "
                          "nothing to wait for (allowed: no run.node_timeout; it is for run.engine = \"flower\" and "
                          "run.workers)")
    if "node_timeout" in given and not on_nodes and run.workers == 1:
        raise ConfigError("run.node_timeout: the time to wait for a worker process, and run.workers = 1 starts none "
                          "(allowed: no run.node_timeout, or run.workers > 1 or \"auto\")")
    if "client_chunk" in given and run.execution == "per_client":
        raise ConfigError('run.client_chunk: vectorised execution\'s clients computed together, and run.execution = '
                          '"per_client" computes one at a time (allowed: no run.client_chunk, or run.execution = '
                          '"vectorised" or "auto")')
