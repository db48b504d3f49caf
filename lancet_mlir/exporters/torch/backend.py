"""A `torch.compile` backend: `aot_autograd` hands each ATen graph to `optimize`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.fx import GraphModule


def make_backend(optimize: Callable[[GraphModule], GraphModule]) -> Callable[..., Any]:
    """A backend for `torch.compile(fn, backend=...)`.

    `aot_autograd` traces the step into ATen graphs (one whole-step graph when the step calls
    `torch.autograd.grad` and `torch._dynamo.config.trace_autograd_ops` is True, else a
    forward and a backward graph); each is replaced by `optimize(graph)` and run as it is.
    """
    from torch._dynamo.backends.common import aot_autograd

    def compile_graph(gm: GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        forward = optimize(gm).forward

        def boxed(args: list[Any]) -> Any:  # aot_autograd's boxed calling convention
            values = list(args)
            args.clear()  # the caller's list may hold the only references: free them early
            return forward(*values)

        boxed._boxed_call = True  # type: ignore[attr-defined]
        return boxed

    return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph)
