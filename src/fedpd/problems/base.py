"""A federated problem: every client's data, a model and a loss.

Samples of all clients are stored concatenated with offsets (client ``i`` owns rows
``offsets[i]:offsets[i+1]``), so clients of very different sizes cost nothing extra and a
minibatch for K clients is one gather. The objective is the paper's

    f(x) = (1/N) Σ_i f_i(x),   f_i(x) = mean_{j ∈ client i} loss(model(x, a_j), b_j) + r(x),

uniform over clients (FedPD, FedDyn and the primal-dual family minimise this f).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable

import torch
from torch import Tensor, nn
from torch.func import vmap

from fedpd.flat import FlatModel
from fedpd.ordered import ordered_sq_norm, ordered_sum
from fedpd.problems.losses import BATCH_MEAN
from fedpd.streams import ClientStreams


@dataclass
class ClientSplit:
    """All clients' samples of one split (train or test), concatenated. ``x`` and ``y`` may be
    :class:`fedpd.problems.lazy.LazyRows` (samples generated on demand): read them by
    slices or index tensors only, as every method here does."""

    x: Tensor
    y: Tensor
    offsets: Tensor  # int64 [N + 1]

    @property
    def num_clients(self) -> int:
        return self.offsets.numel() - 1

    @cached_property
    def sizes(self) -> Tensor:
        """Samples per client, int64 [N] (computed once: read every round, and N may be 10⁶)."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype of sample weights W: the samples' own when floating, else float32."""
        return self.x.dtype if self.x.is_floating_point() else torch.float32

    @property
    def owner(self) -> Tensor:
        """The client of every sample, int64 [n]."""
        return torch.repeat_interleave(torch.arange(self.num_clients, device=self.offsets.device), self.sizes)

    @classmethod
    def from_parts(cls, xs: list[Tensor], ys: list[Tensor]) -> "ClientSplit":
        sizes = torch.tensor([len(y) for y in ys], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        return cls(torch.cat(xs), torch.cat(ys), offsets)

    def padded(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Every sample of clients ``ids``, padded to the largest: X [K, m, ...], Y [K, m], W [K, m]
        with W = 1 on real samples and 0 on padding."""
        sizes = self.sizes[ids]
        m = int(sizes.max()) if ids.numel() else 0
        j = torch.arange(m, device=sizes.device)
        mask = j[None, :] < sizes[:, None]
        X, Y = self.take(ids, torch.where(mask, j[None, :], 0))
        return X, Y, mask.to(self.weight_dtype)

    #: uniforms a minibatch draws per sample from the client's stream (its position; an
    #: augmented split draws its crop too)
    uniforms_per_sample = 1

    def minibatch(self, ids: Tensor, batch_size: int, rng: ClientStreams) -> tuple[Tensor, Tensor, Tensor]:
        """``batch_size`` samples per client drawn uniformly with replacement from each client's own
        stream (``rng``, one row per client of ``ids``): X [K, B, ...], Y [K, B], W [K, B]."""
        return self.batch_from(ids, rng.uniform(batch_size * self.uniforms_per_sample))

    def batch_from(self, ids: Tensor, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The minibatch that the uniforms ``u`` [K, B · uniforms_per_sample] (each client's draws,
        in stream order) pick: sample j of client k is its ⌊u[k, j] · n_k⌋-th."""
        u = u.to(self.offsets.device)
        local = (u * self.sizes[ids][:, None]).long()
        X, Y = self.take(ids, local)
        return X, Y, torch.ones(local.shape, dtype=self.weight_dtype, device=self.x.device)

    def batches_from(self, ids: Tensor, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The minibatches of S steps in one gather: ``u`` [K, S, B · uniforms_per_sample] ->
        X [K, S, B, ...], Y [K, S, B, ...], W [K, S, B], step s being ``batch_from(ids, u[:, s])``."""
        k, s, n = u.shape
        b = n // self.uniforms_per_sample
        if self.uniforms_per_sample == 1:  # positions only: every step's draws side by side, one take per client
            X, Y, W = self.batch_from(ids, u.reshape(k, s * n))
        else:  # the draws are laid out per step (positions, then the rest): a row per (client, step)
            X, Y, W = self.batch_from(ids.repeat_interleave(s), u.reshape(k * s, n))
        return X.reshape(k, s, b, *X.shape[2:]), Y.reshape(k, s, b, *Y.shape[2:]), W.reshape(k, s, b)

    def take(self, ids: Tensor, local: Tensor) -> tuple[Tensor, Tensor]:
        """Samples ``local`` [K, m] (positions within each client) of clients ``ids`` [K]: X, Y."""
        if isinstance(self.x, Tensor):
            index = (self.offsets[ids][:, None] + local).reshape(-1)
            shape = local.shape
            return (self.x.index_select(0, index).view(*shape, *self.x.shape[1:]),
                    self.y.index_select(0, index).view(*shape, *self.y.shape[1:]))
        return self.x.take(ids, local), self.y.take(ids, local)  # generated on demand

    def to(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> "ClientSplit":
        """The same split with float data in ``dtype`` and everything on ``device`` (same class)."""
        x = self.x.to(dtype) if dtype is not None and self.x.is_floating_point() else self.x
        y = self.y.to(dtype) if dtype is not None and self.y.is_floating_point() else self.y
        return replace(self, x=x.to(device), y=y.to(device), offsets=self.offsets.to(device))


@dataclass
class Problem:
    """Federated data + model + per-sample loss (+ an optional regulariser r on the flat vector).

    ``quadratic``, when set, maps (train split, client ids) to (H [K, d, d], g [K, d]) with
    f_i(x) = ½xᵀH_i x − g_iᵀx + c_i; it enables the exact local solver.
    """

    name: str
    train: ClientSplit
    test: ClientSplit
    model: FlatModel
    loss: Callable[[Tensor, Tensor], Tensor]  # (outputs [B, ...], targets [B]) -> per-sample [B]
    x_init: Tensor
    classifies: bool = False
    regularizer: Callable[[Tensor], Tensor] | None = None
    quadratic: Callable[[ClientSplit, Tensor], tuple[Tensor, Tensor]] | None = None
    predict: Callable[[Tensor], Tensor] | None = None  # outputs -> predicted labels
    info: dict = field(default_factory=dict)
    #: per-sample gradients the clients have computed so far (counted by ClientData.gradient)
    sample_grads: int | Tensor = 0
    #: also count them per client of each call (``ClientData.work``): the clock's compute time
    #: (``[system]``, fedpd.system); off, nothing is tallied
    tally_work: bool = False
    #: how client gradients are computed: all rows in one vectorised pass (small models), or one
    #: client at a time through the module itself (large models; run.execution, fedpd.runner)
    per_client: bool = False

    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    @property
    def dim(self) -> int:
        return self.model.dim

    @property
    def device(self) -> torch.device:
        return self.x_init.device

    def gradients(self):
        """∇f_i at x for a leading axis of clients (or samples): (x [K, d], X [K, B, ...], Y [K, B],
        W [K, B], out [K, d] or None) -> [K, d], written into ``out`` when the way below writes
        into a buffer (per client). Not counted: :meth:`ClientData.gradient` counts training work.

        Two ways, chosen once per run (``per_client``); each row depends only on its own inputs,
        so grouping clients never changes a result:

        * vectorised: the forward pass ``vmap``-ed over the clients, one ordinary autograd call on
          Σ_k f_k (f_k depends on x_k alone, so its gradient with respect to the stacked x is every
          client's own gradient) — for small models, where a step is mostly Python overhead;
          multinomial logistic regression skips autograd for its closed form
          (:func:`softmax_regression_gradients`);
        * per client: the module itself, its parameters views of x_k and their gradients views
          of the flat ∇f_k (:meth:`FlatModel.bind`; the solver's buffer:
          :meth:`ClientData.gradient`) — for large models,
          where vectorising over clients copies and transposes every weight gradient. The two
          agree to rounding, not bitwise.
        """
        return self._per_client_gradients if self.per_client else self._client_gradients

    def _per_client_gradients(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, out: Tensor | None = None) -> Tensor:
        out = torch.empty_like(x) if out is None else out
        for k in range(x.shape[0]):
            self._one_gradient(x[k], X[k], Y[k], None if W is None else W[k], out[k])
        return out

    def _one_gradient(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor | None, out: Tensor) -> None:
        """∇f_i(x) for one client through the template module, written into ``out`` [d] (see
        :meth:`gradients`) by one ``cat`` of the parameters' gradients (:meth:`FlatModel.gradient`)."""
        with torch.enable_grad():
            self.model.gradient(self._module_loss(x, X, Y, W), out)
            if self.regularizer is not None:
                leaf = x.detach().clone().requires_grad_(True)
                out.add_(torch.autograd.grad(self.regularizer(leaf), leaf)[0])

    def _module_loss(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor | None) -> Tensor:
        """One client's weighted mean batch loss through the template module at x [d] (its
        parameters views of x: :meth:`FlatModel.bind`, once per iterate, which the solver updates
        in place from step to step). A minibatch weighs every sample 1 (W None, or all ones): its
        plain mean is the same number in fewer ops, one fused op where the loss has one
        (:data:`fedpd.problems.losses.BATCH_MEAN`). Call with grad enabled."""
        self.model.bind(x.detach())
        outputs = self.model.module(X)
        if W is None or torch.equal(W, self._unit_weights(W.shape, W.dtype, W.device)):  # one call, no temporaries
            fused = BATCH_MEAN.get(self.loss)
            return fused(outputs, Y) if fused is not None else self.loss(outputs, Y).mean()
        return (self.loss(outputs, Y) * W).sum() / W.sum()

    def _unit_weights(self, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Sample weights of 1, kept per shape (a run's batches have one or two; never written to)."""
        cache = self.__dict__.setdefault("_ones", {})
        key = (shape, dtype, device)
        ones = cache.get(key)
        if ones is None:
            ones = cache[key] = torch.ones(shape, dtype=dtype, device=device)
        return ones

    def descend(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, lr: float, grad_sq: bool = False) -> Tensor | None:
        """The plain SGD step x ← x − lr·∇f_i(x), in place, for every row of x [K, d]. Per client
        (without a regulariser), each parameter's fresh gradient is added into its view of x_k
        (one ``torch._foreach_add_``): the numbers of ``x.add_(gradient, alpha=-lr)`` without
        the flat gradient in between — two passes over d fewer per step. ``grad_sq``: returns
        the [K] ‖∇f_i(x)‖² before the step (per client: from the parameters' gradients, the same
        to rounding as from the flat one). Not counted."""
        if not self.per_client or self.regularizer is not None:
            g = self.gradients()(x, X, Y, W)
            norms = ordered_sq_norm(g, 1) if grad_sq else None
            x.add_(g, alpha=-lr)
            return norms
        norms = torch.empty(x.shape[0], dtype=x.dtype, device=x.device) if grad_sq else None
        for k in range(x.shape[0]):
            with torch.enable_grad():
                grads = self.model.grads(self._module_loss(x[k], X[k], Y[k], None if W is None else W[k]))
            if grad_sq:
                norms[k] = torch.stack(torch._foreach_norm(grads)).square().sum()
            torch._foreach_add_(self.model.views, grads, alpha=-lr)
        return norms

    def _client_gradients(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, out: Tensor | None = None) -> Tensor:
        """The vectorised way (``out`` is not used: autograd gives the [K, d] gradient itself)."""
        if W is None:  # every sample weighs 1: the same numbers as the mean
            W = self._unit_weights(Y.shape[:2], self.train.weight_dtype, Y.device)
        linear = softmax_regression(self)
        if linear is not None:
            return softmax_regression_gradients(linear, x, X, Y, W)
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self._vectorised_losses(x, X, Y, W).sum(), x)
        return g

    def _vectorised_losses(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
        """f_k at x_k for every row k: the weighted mean loss of the ``vmap``-ed forward (+ r)."""
        forward = self.__dict__.get("_vmapped_model")
        if forward is None:
            forward = self.__dict__["_vmapped_model"] = vmap(self.model)
        outputs = forward(x, X)
        k, b = Y.shape[:2]
        per_sample = self.loss(outputs.reshape(k * b, *outputs.shape[2:]), Y.reshape(k * b)).reshape(k, b)
        value = ordered_sum(per_sample * W, 1) / ordered_sum(W, 1)
        if self.regularizer is not None:
            value = value + vmap(self.regularizer)(x)
        return value

    def losses(self):
        """f_i at x for a leading axis of clients: (x [K, d], X [K, B, ...], Y [K, B], W [K, B] or
        None) -> [K], computed the way :meth:`gradients` computes ∇f_i (``per_client``: one client at
        a time through the module; else the ``vmap``-ed forward), without autograd. Not counted:
        :meth:`ClientData.loss` counts it."""
        return self._per_client_losses if self.per_client else self._client_losses

    def _per_client_losses(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor | None) -> Tensor:
        out = x.new_empty(x.shape[0])
        with torch.no_grad():
            for k in range(x.shape[0]):
                value = self._module_loss(x[k], X[k], Y[k], None if W is None else W[k])
                out[k] = value if self.regularizer is None else value + self.regularizer(x[k])
        return out

    def _client_losses(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor | None) -> Tensor:
        if W is None:  # every sample weighs 1
            W = self._unit_weights(Y.shape[:2], self.train.weight_dtype, Y.device)
        with torch.no_grad():
            return self._vectorised_losses(x, X, Y, W)

    def count(self, W: Tensor | None, active: Tensor | None = None, batch: tuple[int, int] = (0, 0)) -> None:
        """Add the real samples of a gradient call to ``sample_grads`` (rows ``active`` only:
        a straggler that is done computes nothing, whatever a vectorised loop does). ``W``
        None: every sample of the [K, B] ``batch`` weighs 1 (counted with no tensor op)."""
        if W is None:
            rows, per_row = batch
            self.sample_grads = self.sample_grads + (rows if active is None else active.sum()) * per_row
            return
        if active is not None:
            W = W[active.to(W.device)]
        self.sample_grads = self.sample_grads + W.count_nonzero()

    def client_loss(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
        """f_i at x on a (weighted) batch of one client; vmap over clients for [K, d]."""
        per_sample = self.loss(self.model(x, X), Y)
        value = (per_sample * W).sum() / W.sum()
        if self.regularizer is not None:
            value = value + self.regularizer(x)
        return value

    def to(self, dtype: torch.dtype, device: torch.device | str = "cpu") -> "Problem":
        """The same problem with float data and x_init in ``dtype``, data, model and x_init on
        ``device`` (the model's parameters are only a template: fedpd evaluates it at flat vectors)."""
        self.train, self.test = self.train.to(dtype, device), self.test.to(dtype, device)
        self.x_init = self.x_init.to(dtype).to(device)
        self.model.to(device)
        self.__dict__.pop("_vmapped_model", None)
        self.__dict__.pop("_eval_weights", None)
        self.__dict__.pop("_eval_chunk", None)
        self.__dict__.pop("_ones", None)
        return self


def softmax_regression(problem: Problem) -> nn.Linear | None:
    """The Linear layer when the problem is multinomial logistic regression — one ``nn.Linear``
    (bare, or :class:`fedpd.models.LogisticRegression`) with cross-entropy loss and no
    regulariser — whose gradient has a closed form; else None."""
    from fedpd.models import LogisticRegression
    from fedpd.problems import losses

    module = problem.model.module
    linear = module.linear if isinstance(module, LogisticRegression) else module
    if (isinstance(linear, nn.Linear) and linear.out_features >= 2 and problem.loss is losses.cross_entropy
            and problem.regularizer is None and not problem.model.buffers):
        return linear
    return None


def softmax_regression_gradients(linear: nn.Linear, x: Tensor, X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
    """∇f_k of weighted mean cross-entropy of logits X_k A_kᵀ + b_k for every row k at once:
    (softmax − one-hot)ᵀ X / Σ W, in a handful of batched ops instead of an autograd pass — the
    common convex baseline (MNIST, FedProx's Synthetic, Fed+'s MNIST) runs several times faster.
    The layout is the flat vector's: the weight [C, F] row-major, then the bias [C]."""
    k, (c, f) = x.shape[0], linear.weight.shape
    A = x[:, : c * f].view(k, c, f)
    inputs = X.reshape(k, X.shape[1], f).to(x.dtype)
    logits = torch.bmm(inputs, A.transpose(1, 2))
    if linear.bias is not None:
        logits = logits + x[:, c * f:].unsqueeze(1)
    residual = torch.softmax(logits, -1)
    residual.scatter_add_(2, Y.long().unsqueeze(-1), torch.full_like(Y, -1, dtype=residual.dtype).unsqueeze(-1))
    residual = residual * (W / W.sum(1, keepdim=True)).to(residual.dtype).unsqueeze(-1)
    grad_A = torch.bmm(residual.transpose(1, 2), inputs).reshape(k, c * f)
    return torch.cat([grad_A, residual.sum(1)], 1) if linear.bias is not None else grad_A


class ClientData:
    """What a client rule may read of the problem: the training data of the clients ``ids`` of one
    call — nobody else's — with its model and loss. Rows follow ``ids``.

    ``batch(...)`` draws come from each client's own stream, and every gradient is counted in
    the problem's ``sample_grads`` where it is computed."""

    def __init__(self, problem: Problem, ids: Tensor, parent: tuple["ClientData", Tensor] | None = None):
        self._problem, self.ids = problem, ids
        self.sizes = problem.train.sizes[ids.to(problem.train.offsets.device)]
        self._all = None
        # the sample gradients of each client counted so far (problem.tally_work): a count for every
        # row, plus a tensor [K] for calls whose rows counted differently; ``parent``: (the data
        # this is a selection of, its rows there) — counted there too
        self._parent, self._even, self._rows = parent, 0, None

    @property
    def work(self) -> Tensor:
        """[K] float64: the sample gradients each client of the call has counted (rows that are not
        clients — Parallel SAGA's single samples — spread evenly over the call's clients)."""
        even = torch.full((len(self),), float(self._even), dtype=torch.float64)
        return even if self._rows is None else even + self._rows

    def _tally(self, W: Tensor | None, active: Tensor | None, batch: tuple[int, int]) -> None:
        self._problem.count(W, active, batch)
        if not self._problem.tally_work:
            return
        rows = batch[0]
        if W is None and active is None and rows == len(self):
            self._add_even(batch[1])
            return
        per_row = (torch.full((rows,), float(batch[1]), dtype=torch.float64) if W is None
                   else W.reshape(rows, -1).count_nonzero(1).to("cpu", torch.float64))
        if active is not None:
            per_row = per_row * active.to("cpu", torch.float64)
        if rows != len(self):
            per_row = torch.full((len(self),), float(per_row.sum()) / max(len(self), 1), dtype=torch.float64)
        self._add_rows(per_row)

    def _add_even(self, count: int) -> None:
        self._even += count
        if self._parent is not None:
            parent, rows = self._parent
            parent._add_rows(torch.zeros(len(parent), dtype=torch.float64).index_fill_(0, rows.cpu(), float(count)))

    def _add_rows(self, per_row: Tensor) -> None:
        self._rows = per_row if self._rows is None else self._rows + per_row
        if self._parent is not None:
            parent, rows = self._parent
            parent._add_rows(torch.zeros(len(parent), dtype=torch.float64).index_add_(0, rows.cpu(), per_row))

    def __len__(self) -> int:
        return self.ids.numel()

    @property
    def quadratic(self) -> tuple[Tensor, Tensor] | None:
        """(H [K, d, d], g [K, d]) of quadratic f_i = ½xᵀH_i x − g_iᵀx + c_i, or None."""
        q = self._problem.quadratic
        return None if q is None else q(self._problem.train, self.ids)

    def all(self) -> tuple[Tensor, Tensor, Tensor]:
        """Every own sample, padded to the largest client of the call (W = 0 on padding)."""
        if self._all is None:
            self._all = self._problem.train.padded(self.ids)
        return self._all

    def minibatch(self, batch_size: int, rng: ClientStreams) -> tuple[Tensor, Tensor, Tensor]:
        """``batch_size`` own samples per client, uniformly with replacement (augmented if the
        problem augments), drawn from ``rng``."""
        return self._problem.train.minibatch(self.ids, batch_size, rng)

    def batch_uniforms(self, batch_size: int, rng: ClientStreams) -> Tensor:
        """The draws of S minibatches per client in one stream call: ``rng`` holds S streams per
        client (rows k·S + s, as :meth:`ClientStreams.children` makes them); [K, S, n] for
        :meth:`batch_from` — the numbers ``minibatch(batch_size, stream)`` draws from each."""
        n = batch_size * self._problem.train.uniforms_per_sample
        return rng.uniform(n).view(len(self), len(rng) // max(1, len(self)), n)

    def batch_from(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The minibatch the draws ``u`` [K, n] pick (a step of :meth:`batch_uniforms`)."""
        return self._problem.train.batch_from(self.ids, u)

    def batches_from(self, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The minibatches of the draws ``u`` [K, S, n] (S steps of :meth:`batch_uniforms`) in one
        gather: X [K, S, B, ...], Y, W."""
        return self._problem.train.batches_from(self.ids, u)

    def samples(self, local: Tensor) -> tuple[Tensor, Tensor]:
        """Own samples by local index (``local`` [K, b], entries < each client's size): X, Y."""
        split = self._problem.train
        return split.take(self.ids.to(split.offsets.device), local.to(split.offsets.device))

    def gradient(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, active: Tensor | None = None,
                 out: Tensor | None = None) -> Tensor:
        """∇f at x [M, d] on (X, Y, W) per leading row (clients, or single samples), counted
        (rows ``active`` only); W [M, B] weighs the samples, None: each 1 (a minibatch). ``out``:
        a buffer like x the result may be written into (per-client execution does: no [M, d]
        allocated per step); the caller must not keep the result past its next use of the buffer."""
        self._tally(W, active, Y.shape[:2])
        return self._problem.gradients()(x, X, Y, W, out)

    def loss(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, active: Tensor | None = None) -> Tensor:
        """f at x [M, d] on (X, Y, W) per leading row, [M], counted as :meth:`gradient` counts (each
        real sample of rows ``active`` adds one to ``sample_grads``: a forward pass over it)."""
        self._tally(W, active, Y.shape[:2])
        return self._problem.losses()(x, X, Y, W)

    def descend(self, x: Tensor, X: Tensor, Y: Tensor, W: Tensor, lr: float, grad_sq: bool = False) -> Tensor | None:
        """x ← x − lr·∇f at x [M, d], in place, per row (every row takes the step), counted: the
        plain SGD step, fused where the execution allows (:meth:`Problem.descend`; ``grad_sq``:
        returns the [M] ‖∇f‖² before the step)."""
        self._tally(W, None, Y.shape[:2])
        return self._problem.descend(x, X, Y, W, lr, grad_sq)
