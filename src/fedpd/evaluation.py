"""Metrics at a model x: f and ‖∇f‖² over all clients' training data, loss/accuracy on the
pooled test data. f = (1/N) Σ_i f_i, so sample j of client i weighs 1/(N·n_i).

``clients`` (``run.eval_clients``): the same metrics over a sample S of the clients
instead — f_S = (1/|S|) Σ_{i∈S} f_i, its gradient, and the test samples of S pooled. Samples are
read chunk by chunk (slices of the split, or of S's samples), never as one [n] array, so a split
whose samples are generated on demand (:mod:`fedpd.problems.lazy`) is read only where needed.

``metrics`` / ``samples`` (``run.eval_metrics``, ``run.eval_train_samples``): only some metrics, and
the training loss on a fixed seeded sample of the training samples — what a test-accuracy table
needs, without the full-data gradient (FedPD's stationarity metric) that costs most.

With the ``backdoor`` attack configured (its trigger in ``problem.info["backdoor"]``) the test
metrics add ``backdoor_acc``: the share of the test samples whose label is not the target that
the model classifies as the target once the trigger is stamped on them."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fedpd.ordered import ordered_mean, ordered_sq_norm, ordered_sum
from fedpd.problems.base import Problem
from fedpd.problems.poisoning import apply_trigger

CHUNK = 8192  # the most samples a chunk holds
#: what the activations a chunk's forward keeps for its backward may take (``run.eval_batch_size``
#: = 0): a conv net's chunk is sized by it, a small model's is CHUNK
ACTIVATION_BUDGET = 32 << 20


def chunk_size(problem: Problem, batch: int = 0) -> int:
    """Samples per evaluation chunk: ``batch`` when > 0, else as many as keep the activations saved
    for the gradient within :data:`ACTIVATION_BUDGET` (at most CHUNK). The bytes a sample adds
    are measured once per problem from two small forwards (1 and 2 samples), so the size is a
    function of the model and the data's shape alone: the same on every machine and resume."""
    if batch > 0:
        return batch
    cached = problem.__dict__.get("_eval_chunk")
    if cached is None:
        per_sample = _saved_bytes(problem, 2) - _saved_bytes(problem, 1)
        cached = problem.__dict__["_eval_chunk"] = max(1, min(CHUNK, ACTIVATION_BUDGET // max(per_sample, 1)))
    return cached


def _saved_bytes(problem: Problem, n: int) -> int:
    """Bytes the forward and loss of the first ``n`` training samples keep for backward."""
    split = problem.train
    if split.y.shape[0] < 2:
        return 0
    saved = 0

    def pack(t: Tensor) -> None:
        nonlocal saved
        saved += t.numel() * t.element_size()
        # keep nothing: a node that saves its own output (ReLU, log-softmax) would hold the tensor
        # that holds the node, a cycle through autograd's C++ graph that gc cannot free, and with it
        # the training set x[:n] is a view of (measured: 188 MB of MNIST per problem)
        return None

    x = problem.x_init.detach().requires_grad_(True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        problem.loss(problem.model(x, split.x[:n]), split.y[:n]).sum()
    return saved


def _chunks(split, clients: Tensor | None, chunk: int = CHUNK):
    """(index, owner) chunks of at most ``chunk`` samples: ``index`` a slice of the split (all
    clients) or sample positions (the clients ``clients``, ascending), ``owner`` each sample's
    client."""
    offsets = split.offsets
    if clients is None:
        n = split.y.shape[0]
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            pos = torch.arange(start, stop, device=offsets.device)
            yield slice(start, stop), torch.searchsorted(offsets, pos, right=True) - 1
        return
    sizes = split.sizes[clients]
    first, held = 0, 0
    bounds = []
    for j, m in enumerate(sizes.tolist()):
        if held and held + m > chunk:
            bounds.append((first, j))
            first, held = j, 0
        held += m
    bounds.append((first, clients.numel()))
    for a, b in bounds:
        ids, m = clients[a:b], sizes[a:b]
        if int(m.sum()) == 0:
            continue
        owner = torch.repeat_interleave(ids, m)
        start = torch.repeat_interleave(offsets[ids] - (torch.cumsum(m, 0) - m), m)
        yield start + torch.arange(owner.numel(), device=offsets.device), owner


def _inverse_sizes(split, clients: Tensor | None) -> Tensor:
    """1 / (clients with data · n_i) per client (the weight of one of its samples in f)."""
    sizes = split.sizes.to(torch.float64)
    present = int((sizes > 0).sum()) if clients is None else int((sizes[clients] > 0).sum())
    return 1.0 / (present * sizes.clamp(min=1))


#: the metrics :func:`evaluate` can take (``run.eval_metrics`` chooses among them)
METRICS = ("train_loss", "grad_norm_sq", "test_loss", "test_acc")


def _sample_chunks(split, samples: Tensor, chunk: int):
    """(positions, owner) chunks of at most ``chunk`` of the sample positions ``samples``."""
    for start in range(0, samples.numel(), chunk):
        pos = samples[start:start + chunk]
        yield pos, torch.searchsorted(split.offsets, pos, right=True) - 1


def evaluate(problem: Problem, x: Tensor, clients: Tensor | None = None, batch: int = 0,
             metrics: tuple[str, ...] | list[str] | None = None, samples: Tensor | None = None) -> dict[str, float]:
    """The metrics at x, over chunks of ``batch`` samples (0: :func:`chunk_size`'s automatic size;
    the chunking changes the metrics at rounding only).

    ``metrics`` (``run.eval_metrics``): which of :data:`METRICS` to take (None: all); without
    ``grad_norm_sq`` the training data see a forward only. ``samples`` (``run.eval_train_samples``):
    sample positions of the training split (a uniform draw without replacement from the P samples
    of ``clients``, or of every client): f is then estimated as (P/m) Σ_{j∈S} ℓ_j / (N·n_i(j)) over
    the m drawn samples, unbiased, and equal to their plain mean loss when every n_i is the same."""
    chosen = METRICS if metrics is None else tuple(metrics)
    out: dict[str, float] = {}
    chunk = chunk_size(problem, batch)
    if "train_loss" in chosen or "grad_norm_sq" in chosen:
        gradient = "grad_norm_sq" in chosen
        split = problem.train
        inverse = _inverse_sizes(split, clients)
        if samples is None:
            chunks, scale = _chunks(split, clients, chunk), 1.0
        else:
            pool = split.y.shape[0] if clients is None else int(split.sizes[clients].sum())
            chunks, scale = _sample_chunks(split, samples, chunk), pool / samples.numel()
        x_eval = x.detach().requires_grad_(gradient)
        loss_total, grad_total = 0.0, torch.zeros_like(x_eval) if gradient else None
        with torch.set_grad_enabled(gradient):
            for index, owner in chunks:
                per_sample = problem.loss(problem.model(x_eval, split.x[index]), split.y[index])
                value = ordered_sum(per_sample * (inverse[owner] * scale).to(per_sample.dtype))
                if gradient:
                    (g,) = torch.autograd.grad(value, x_eval)
                    grad_total += g
                loss_total += float(value.detach())
            if problem.regularizer is not None:
                value = problem.regularizer(x_eval)
                if gradient:
                    (g,) = torch.autograd.grad(value, x_eval)
                    grad_total += g
                loss_total += float(value.detach())
        if "train_loss" in chosen:
            out["train_loss"] = loss_total
        if gradient:
            out["grad_norm_sq"] = float(ordered_sq_norm(grad_total))
    if "test_loss" in chosen or "test_acc" in chosen:
        test = evaluate_test(problem, x.detach(), clients, chunk)
        out.update({k: v for k, v in test.items() if k in chosen or k == "backdoor_acc"})  # the attack asked for it
    return out


@torch.no_grad()
def evaluate_test(problem: Problem, x: Tensor, clients: Tensor | None = None, batch: int = 0) -> dict[str, float]:
    split = problem.test
    n = split.y.shape[0] if clients is None else int(split.sizes[clients].sum())
    if n == 0:
        return {}
    backdoor = problem.info.get("backdoor") if problem.classifies else None
    loss_sum, correct, hits, eligible = 0.0, 0, 0, 0
    for index, _ in _chunks(split, clients, chunk_size(problem, batch)):
        inputs = split.x[index]
        outputs = problem.model(x, inputs)
        y = split.y[index]
        loss_sum += float(ordered_sum(problem.loss(outputs, y)))
        if problem.classifies:
            correct += int((problem.predict(outputs) == y).sum())
        if backdoor is not None:
            h, e = _backdoor_hits(problem, x, inputs, y, backdoor)
            hits, eligible = hits + h, eligible + e
    out = {"test_loss": loss_sum / n}
    if problem.classifies:
        out["test_acc"] = correct / n
    if backdoor is not None and eligible:
        out["backdoor_acc"] = hits / eligible
    return out


def _backdoor_hits(problem: Problem, x: Tensor, inputs: Tensor, y: Tensor, backdoor: dict) -> tuple[int, int]:
    """The backdoor attack's success on a chunk (:class:`fedpd.attacks.Backdoor`): of the test
    samples whose true label is not the target, (how many the model classifies as the target
    once the trigger is stamped on them, how many there are). ``backdoor_acc`` = their ratio.
    The trigger is the one stamped on the attackers' training data (:mod:`fedpd.problems.poisoning`)."""
    keep = y != backdoor["target"]
    if not bool(keep.any()):
        return 0, 0
    stamped = apply_trigger(inputs[keep], backdoor["size"], backdoor["value"])
    predicted = problem.predict(problem.model(x, stamped))
    return int((predicted == backdoor["target"]).sum()), int(keep.sum())


@torch.no_grad()
def evaluate_personal(problem: Problem, models: Tensor, worst: float = 0.1,
                      clients: Tensor | None = None, batch: int = 0) -> dict[str, float]:
    """Each client's own model on its own test split (Fed+, Kundu et al. 2022, §5.1 and Table 2).

    ``models`` is [N, d] (client i's model in row i) or [d] (the server model for every client).
    Per client the mean test loss, and the accuracy (classification) or mean squared error
    (regression: (output − y)²); reported as means over the clients that have test samples —
    ``personal_loss``, ``personal_acc`` / ``personal_mse`` — and as the mean over the worst
    ``worst`` fraction of them (at least one client): ``personal_acc_worst10`` (lowest accuracies),
    ``personal_mse_worst10`` (highest errors). Clients are evaluated in vectorised chunks.
    ``clients``: only these clients (ascending; ``run.eval_clients``); ``batch`` as in :func:`evaluate`.
    """
    split = problem.test
    n_clients = split.num_clients
    if split.y.shape[0] == 0:
        return {}
    device = split.offsets.device
    chosen = torch.arange(n_clients, device=device) if clients is None else clients.to(device)
    sizes = split.sizes
    loss_sum = torch.zeros(n_clients, dtype=torch.float64, device=device)
    score_sum = torch.zeros(n_clients, dtype=torch.float64, device=device)  # correct predictions or squared errors
    if models.dim() == 1:
        for index, owner in _chunks(split, clients, chunk_size(problem, batch)):
            out = problem.model(models, split.x[index])
            y = split.y[index]
            loss_sum.index_add_(0, owner, problem.loss(out, y).double())
            score_sum.index_add_(0, owner, _score(problem, out, y))
    else:
        model_fn = torch.func.vmap(problem.model)
        per_sample = max(1, split.x[:1].numel())
        step = max(1, CHUNK * 64 // (per_sample * max(1, int(sizes[chosen].max()))))  # clients per chunk
        for start in range(0, chosen.numel(), step):
            ids = chosen[start:start + step]
            X, Y, W = split.padded(ids)
            out = model_fn(models[ids].to(X.dtype if X.is_floating_point() else models.dtype), X)
            k, m = Y.shape[:2]
            flat_out = out.reshape(k * m, *out.shape[2:])
            mask = W.reshape(-1).double()
            loss = problem.loss(flat_out, Y.reshape(k * m)).double() * mask
            score = _score(problem, flat_out, Y.reshape(k * m)) * mask
            loss_sum[ids] = ordered_sum(loss.reshape(k, m), 1)
            score_sum[ids] = ordered_sum(score.reshape(k, m), 1)
    if clients is not None:
        sizes, loss_sum, score_sum = sizes[chosen], loss_sum[chosen], score_sum[chosen]
    has = sizes > 0
    count = sizes[has].double()
    loss_c, score_c = loss_sum[has] / count, score_sum[has] / count
    n_worst = max(1, math.ceil(worst * int(has.sum())))
    out = {"personal_loss": float(ordered_mean(loss_c))}
    if problem.classifies:
        out["personal_acc"] = float(ordered_mean(score_c))
        out["personal_acc_worst10"] = float(ordered_mean(score_c.sort().values[:n_worst]))
    else:
        out["personal_mse"] = float(ordered_mean(score_c))
        out["personal_mse_worst10"] = float(ordered_mean(score_c.sort(descending=True).values[:n_worst]))
    return out


def _score(problem: Problem, outputs: Tensor, y: Tensor) -> Tensor:
    """Per sample: 1.0 for a correct prediction (classification), else the squared error."""
    if problem.classifies:
        return (problem.predict(outputs) == y).double()
    return (outputs.reshape(y.shape[0], -1)[:, 0] - y).double() ** 2
