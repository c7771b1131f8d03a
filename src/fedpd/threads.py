"""How many CPU threads a run uses (``run.threads``, ``--threads``).

torch's default is one thread per core. On a machine shared with other jobs that oversubscribes
the cores: torch's OpenMP threads wait for each other at every parallel region, and a thread
whose core another job holds stalls them all. Measured on 2 cores with one competing job
(docs/performance.md, "CPU threads"), 2 threads made examples/feddyn.toml 5.3× and
examples/fedavg.toml 4.7× slower than 1 thread, and even a LeNet on MNIST 2.5× slower; on the
quiet machine a second thread saved at most 17 % of the time of the small problems, and made
the LeNet 1.34× faster.

So ``run.threads = 0`` (automatic) means:

1. ``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``) set in the environment: that many, as torch
   reads it (an explicit choice for the whole process);
2. otherwise 1 thread when one local step of the run does less than :data:`PARALLEL_FLOPS`
   floating-point operations (every participant's minibatch through the model, forward and
   backward: participants of a chunk × samples per step × 3 × forward FLOPs per sample;
   :class:`LocalWork`, the estimate the run hands this module with ``run.threads``);
3. otherwise (a large model or batch) one thread per idle core: the cores this process may use
   (CPU affinity and the cgroup CPU quota of a container), less the cores other jobs keep busy
   (the 1-minute load average), at least 1 and at most :data:`MAX_AUTO_THREADS`.

Threads change how fast a run goes, not what it computes (docs/architecture.md, "Determinism"):
:func:`use_threads` gives torch's own kernels the threads and runs BLAS products (MKL) on one
thread, because MKL splits a product's inner sum over its threads — a gradient's sum over samples
then rounds differently at 1 and at 2 threads (measured on an AMX Xeon, float32 and float64 alike;
the split depends on the CPU model, so another machine sees it where this one may not). That is
why ``fedpd run --resume`` and ``fedpd demo`` take ``--threads`` too.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os

import torch
from torch.overrides import TorchFunctionMode

#: below this many floating-point operations per local step a run uses 1 thread (measured on a
#: quiet 2-core machine: a 0.6 GFLOP step, an MLP on MNIST, ran 1.1x faster with a second thread, a
#: 24 GFLOP LeNet step 1.34x; with another job running both were 2.5-5x slower with 2 threads)
PARALLEL_FLOPS = 5e9
MAX_AUTO_THREADS = 8
ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2/v1 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


def _cgroup_quota() -> float | None:
    try:
        text = open("/sys/fs/cgroup/cpu.max").read().split()  # v2: "max 100000" or "200000 100000"
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        if quota > 0 and period > 0:
            return quota / period
    except (OSError, ValueError):
        pass
    return None


def idle_cores() -> float:
    """Cores of the machine that other jobs leave idle: CPUs less the 1-minute load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return float(available_cores())
    return (os.cpu_count() or 1) - load


class _FlopCounter(TorchFunctionMode):
    """Counts the multiply-adds of linear layers, convolutions and matrix products (2 FLOPs each)
    of what runs inside it; cheap (no tracing or compilation)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        try:
            self.flops += _flops(func, args, out)
        except Exception:  # an unusual signature: count nothing for it
            pass
        return out


def _flops(func, args, out) -> int:
    F = torch.nn.functional
    if func is F.linear:
        x, w = args[0], args[1]
        return 2 * (x.numel() // max(1, x.shape[-1])) * w.numel()
    if func in (F.conv1d, F.conv2d, F.conv3d):
        w = args[1]
        return 2 * out.numel() * (w.numel() // max(1, w.shape[0]))
    if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.bmm, torch.mv):
        a = args[0]
        return 2 * out.numel() * (a.shape[-1] if a.dim() else 1)
    return 0


def forward_flops(problem) -> int:
    """FLOPs of the model's forward pass on one training sample."""
    x = problem.train.x[:1]
    if x.numel() == 0:
        return 0
    counter = _FlopCounter()
    with torch.no_grad(), counter:
        problem.model(problem.x_init, x)
    return counter.flops


class LocalWork:
    """A round's local training as the thread and worker rules weigh it, estimated before it runs:
    ``participants`` clients (expected, for a sampler whose number varies), ``chunk`` of them
    computed together, each putting ``batch`` samples through the model in each of ``steps``
    local steps. ``forward`` gives the model's FLOPs for one sample's forward pass (a forward
    pass of one sample, :func:`forward_flops`); it is counted when first asked for, so a run whose
    threads and workers are given never runs it."""

    def __init__(self, participants: int, chunk: int, batch: int, steps: int, forward):
        self.participants, self.chunk, self.batch, self.steps = participants, chunk, batch, steps
        self._forward = forward

    @functools.cached_property
    def forward(self) -> int:
        return self._forward() if callable(self._forward) else self._forward

    @property
    def step_flops(self) -> float:
        """FLOPs of one local step of a chunk (forward and backward, ≈ 3 forward passes)."""
        return 3.0 * self.chunk * self.batch * self.forward

    @property
    def round_flops(self) -> float:
        """FLOPs of a round's local work: every participant's local steps."""
        return 3.0 * self.participants * self.batch * self.forward * self.steps


def auto_threads(work: LocalWork) -> int:
    """The rule of the module docstring, steps 2 and 3."""
    if work.step_flops < PARALLEL_FLOPS:
        return 1
    return max(1, min(available_cores(), MAX_AUTO_THREADS, math.floor(idle_cores() + 0.5)))


@functools.cache
def _mkl_local_threads():
    """MKL's ``MKL_Set_Num_Threads_Local`` (its C interface, in torch's CPU library), or None
    where torch was built without MKL or does not export it."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        setter = lib.MKL_Set_Num_Threads_Local
    except (OSError, AttributeError):  # pragma: no cover - another build of torch
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter


def sequential_blas() -> None:
    """MKL's products on one thread (this thread's setting): their inner sums would otherwise be
    split over MKL's threads in an order that depends on how many there are."""
    setter = _mkl_local_threads()
    if setter is not None:
        setter(1)


def use_threads(threads: int) -> None:
    """``threads`` intra-op threads for torch's own kernels on this thread, and one for MKL's
    products (torch.set_num_threads gives MKL as many; :func:`sequential_blas` takes them back)."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    sequential_blas()


def set_threads(threads: int, work: LocalWork) -> int:
    """Set torch's intra-op threads for the run and return them: ``threads`` (``run.threads``), or
    for 0 the environment's or the automatic choice for a round's ``work``."""
    if not threads:
        env = next((os.environ[v] for v in ENV_VARS if os.environ.get(v, "").strip().isdigit()), None)
        threads = int(env) if env and int(env) > 0 else auto_threads(work)
    use_threads(threads)
    return threads
