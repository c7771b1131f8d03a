"""Flat parameter vectors for any ``torch.nn.Module``.

Every algorithm in fedpd is vector algebra on flat parameter vectors, exactly as in the papers
(``lam += (x - x0) / eta``). :class:`FlatModel` evaluates a module at such a vector with
``torch.func.functional_call`` over views into it, so the same code runs for one vector ``[d]``
or, under ``torch.func.vmap``, for a leading axis of clients ``[K, d]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call


class FlatModel:
    """A module evaluated at flat parameter vectors.

    ``x`` always has shape ``[d]`` here; vectorise over clients with ``torch.func.vmap``.
    Buffers (there should be none: use GroupNorm, not BatchNorm) are passed through unchanged.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        params = dict(module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [math.prod(s) for s in self.shapes]
        self.dim = sum(self.numels)
        self.buffers = dict(module.named_buffers())

    def to(self, device: torch.device | str) -> "FlatModel":
        """Put the module (its buffers; parameters are only a template) on ``device``."""
        self.module.to(device)
        self.buffers = dict(self.module.named_buffers())
        self.__dict__.pop("_params", None)  # bound again at the next use
        return self

    def initial(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The module's current parameters as one flat vector."""
        with torch.no_grad():
            return torch.cat([p.reshape(-1) for p in self.module.parameters()]).to(dtype).clone()

    def unflatten(self, x: Tensor) -> dict[str, Tensor]:
        """Views of ``x`` shaped like the module's parameters (no copies). One ``split`` rather
        than a slice per parameter: its backward writes the gradient once (a slice's backward
        fills a zero vector of the full length per parameter)."""
        if x.shape != (self.dim,):
            raise ValueError(f"flat parameter vector has shape {tuple(x.shape)}; the model has {self.dim} parameters")
        parts = torch.split(x, self.numels)
        return {name: part.view(shape) for name, part, shape in zip(self.names, parts, self.shapes)}

    def bind(self, x: Tensor) -> None:
        """Make the module's parameters views of ``x`` [d] (no copies), to run the module itself at
        x; ``views`` holds the same views as plain tensors (an in-place update may go through them
        without ``no_grad``). Pointed again only at another tensor: an iterate updated in place
        stays bound from step to step. The module keeps x alive until it is bound elsewhere."""
        params = self.__dict__.get("_params")
        if params is None:
            params = self._params = list(self.module.parameters())
            self._bound = None
        key = (x.data_ptr(), x.dtype, x.device)
        if self._bound != key:
            self.views = [value.view(shape) for value, shape in zip(x.split(self.numels), self.shapes)]
            for p, view in zip(params, self.views):
                p.data = view
            self._bound = key

    def grads(self, value: Tensor) -> list[Tensor]:
        """∂value/∂(each bound parameter), in the parameters' order: ``backward`` with every
        ``.grad`` unset first, so autograd hands over the tensors it computed (nothing added into
        an old buffer; measured faster than ``torch.autograd.grad`` on ResNet-18, docs/decisions.md);
        a frozen or unused parameter's is zero. They stay the parameters' ``.grad`` until the
        next call, as after a plain loop's step."""
        params = self._params
        for p in params:
            p.grad = None
        value.backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad for p in params]

    def gradient(self, value: Tensor, out: Tensor) -> Tensor:
        """∂value/∂(the bound parameters), flat, written into ``out`` [d] by one ``cat`` of
        :meth:`grads` (``.grad`` views of a flat buffer would make autograd add each into a
        zeroed buffer instead: two more passes over d)."""
        return torch.cat([g.reshape(-1) for g in self.grads(value)], out=out)

    def mask(self, *names: str) -> Tensor:
        """A bool [d] vector, True where the parameters ``names`` live in the flat vector: each a
        parameter's name (``self.names``, e.g. ``"head.weight"``) or a module's (``"head"``: all of
        its parameters). For :class:`fedpd.solvers.LocalObjective`'s ``free`` (train a part of the
        model) and for a state kept per part (a personal head)."""
        out = torch.zeros(self.dim, dtype=torch.bool)
        for name in names:
            hits = [s for n, s in self.slices().items() if n == name or n.startswith(name + ".")]
            if not hits:
                raise ValueError(f"the model has no parameter or module {name!r} (its parameters: "
                                 f"{', '.join(self.names)})")
            for where in hits:
                out[where] = True
        return out

    def slices(self) -> dict[str, slice]:
        """Where each named parameter lives in the flat vector (for per-layer rules)."""
        out, start = {}, 0
        for name, n in zip(self.names, self.numels):
            out[name] = slice(start, start + n)
            start += n
        return out

    def __call__(self, x: Tensor, inputs: Tensor) -> Tensor:
        params = self.unflatten(x)
        if self.buffers:
            params = {**params, **self.buffers}
        return functional_call(self.module, params, (inputs,))
