"""Metrics at a model x: f and ‖∇f‖² over all clients' training data, loss/accuracy on the
pooled test data. f = (1/N) Σ_i f_i, so sample j of client i weighs 1/(N·n_i)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fedpd.problems.base import Problem

CHUNK = 8192


def _train_weights(problem: Problem) -> Tensor:
    w = problem.__dict__.get("_eval_weights")
    if w is None:
        split = problem.train
        sizes = split.sizes.to(torch.float64)
        present = int((sizes > 0).sum())
        w = (1.0 / (present * sizes.clamp(min=1)))[split.owner]
        problem.__dict__["_eval_weights"] = w
    return w


def evaluate(problem: Problem, x: Tensor) -> dict[str, float]:
    x = x.detach().requires_grad_(True)
    split, weights = problem.train, _train_weights(problem)
    loss_total, grad_total = 0.0, torch.zeros_like(x)
    for start in range(0, split.y.shape[0], CHUNK):
        sl = slice(start, start + CHUNK)
        per_sample = problem.loss(problem.model(x, split.x[sl]), split.y[sl])
        value = (per_sample * weights[sl].to(per_sample.dtype)).sum()
        (g,) = torch.autograd.grad(value, x)
        loss_total += float(value.detach())
        grad_total += g
    if problem.regularizer is not None:
        value = problem.regularizer(x)
        (g,) = torch.autograd.grad(value, x)
        loss_total += float(value.detach())
        grad_total += g
    out = {"train_loss": loss_total, "grad_norm_sq": float((grad_total * grad_total).sum())}
    out.update(evaluate_test(problem, x.detach()))
    return out


@torch.no_grad()
def evaluate_test(problem: Problem, x: Tensor) -> dict[str, float]:
    split = problem.test
    n = split.y.shape[0]
    if n == 0:
        return {}
    loss_sum, correct = 0.0, 0
    for start in range(0, n, CHUNK):
        sl = slice(start, start + CHUNK)
        outputs = problem.model(x, split.x[sl])
        loss_sum += float(problem.loss(outputs, split.y[sl]).sum())
        if problem.classifies:
            correct += int((problem.predict(outputs) == split.y[sl]).sum())
    out = {"test_loss": loss_sum / n}
    if problem.classifies:
        out["test_acc"] = correct / n
    return out


@torch.no_grad()
def evaluate_personal(problem: Problem, models: Tensor, worst: float = 0.1) -> dict[str, float]:
    """Each client's own model on its own test split (Fed+, Kundu et al. 2022, §5.1 and Table 2).

    ``models`` is [N, d] (client i's model in row i) or [d] (the server model for every client).
    Per client the mean test loss, and the accuracy (classification) or mean squared error
    (regression: (output − y)²); reported as means over the clients that have test samples —
    ``personal_loss``, ``personal_acc`` / ``personal_mse`` — and as the mean over the worst
    ``worst`` fraction of them (at least one client): ``personal_acc_worst10`` (lowest accuracies),
    ``personal_mse_worst10`` (highest errors). Clients are evaluated in vectorised chunks.
    """
    split = problem.test
    n_clients = split.num_clients
    if split.y.shape[0] == 0:
        return {}
    sizes = split.sizes
    device = split.x.device
    loss_sum = torch.zeros(n_clients, dtype=torch.float64, device=device)
    score_sum = torch.zeros(n_clients, dtype=torch.float64, device=device)  # correct predictions or squared errors
    owner = split.owner
    if models.dim() == 1:
        for start in range(0, split.y.shape[0], CHUNK):
            sl = slice(start, start + CHUNK)
            out = problem.model(models, split.x[sl])
            loss_sum.index_add_(0, owner[sl], problem.loss(out, split.y[sl]).double())
            score_sum.index_add_(0, owner[sl], _score(problem, out, split.y[sl]))
    else:
        model_fn = torch.func.vmap(problem.model)
        per_sample = max(1, split.x[:1].numel())
        step = max(1, CHUNK * 64 // (per_sample * max(1, int(sizes.max()))))  # clients per chunk
        for start in range(0, n_clients, step):
            ids = torch.arange(start, min(start + step, n_clients), device=device)
            X, Y, W = split.padded(ids)
            out = model_fn(models[ids].to(X.dtype if X.is_floating_point() else models.dtype), X)
            k, m = Y.shape[:2]
            flat_out = out.reshape(k * m, *out.shape[2:])
            mask = W.reshape(-1).double()
            loss = problem.loss(flat_out, Y.reshape(k * m)).double() * mask
            score = _score(problem, flat_out, Y.reshape(k * m)) * mask
            loss_sum[ids] = loss.reshape(k, m).sum(1)
            score_sum[ids] = score.reshape(k, m).sum(1)
    has = sizes > 0
    count = sizes[has].double()
    loss_c, score_c = loss_sum[has] / count, score_sum[has] / count
    n_worst = max(1, math.ceil(worst * int(has.sum())))
    out = {"personal_loss": float(loss_c.mean())}
    if problem.classifies:
        out["personal_acc"] = float(score_c.mean())
        out["personal_acc_worst10"] = float(score_c.sort().values[:n_worst].mean())
    else:
        out["personal_mse"] = float(score_c.mean())
        out["personal_mse_worst10"] = float(score_c.sort(descending=True).values[:n_worst].mean())
    return out


def _score(problem: Problem, outputs: Tensor, y: Tensor) -> Tensor:
    """Per sample: 1.0 for a correct prediction (classification), else the squared error."""
    if problem.classifies:
        return (problem.predict(outputs) == y).double()
    return (outputs.reshape(y.shape[0], -1)[:, 0] - y).double() ** 2
