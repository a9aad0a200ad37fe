"""A __torch_dispatch__ wrapper subclass, as tensor-parallel and quantisation libraries
make (DTensor and friends): no memory of its own that holds its data; torch ops run on
`inner`, and the ops it is handed are recorded in `seen`."""

import typing

import torch
from torch.utils._pytree import tree_map


class Wrapper(torch.Tensor):
    seen: typing.ClassVar[list] = []

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=inner.device
        )

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func)

        def unwrap(value):
            return value.inner if isinstance(value, Wrapper) else value

        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
