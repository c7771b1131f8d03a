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

    def bind(self, x: Tensor, grad: Tensor) -> None:
        """Make the module's parameters views of ``x`` [d] and their ``.grad`` views of ``grad``
        [d] (no copies), to run the module itself at x: ``backward`` then adds each parameter's
        gradient into ``grad`` in place — the flat gradient, with no per-step ``cat``. Pointed
        again only at another tensor: an iterate updated in place and a reused gradient buffer
        stay bound from step to step. The module keeps both alive until it is bound elsewhere."""
        params = self.__dict__.get("_params")
        if params is None:
            params = self._params = list(self.module.parameters())
            self._bound = {}
        for name, flat in (("data", x), ("grad", grad)):
            key = (flat.data_ptr(), flat.dtype, flat.device)
            if self._bound.get(name) != key:
                for p, value, shape in zip(params, flat.split(self.numels), self.shapes):
                    setattr(p, name, value.view(shape))
                self._bound[name] = key

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
