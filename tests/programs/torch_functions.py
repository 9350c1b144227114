"""Scripted, traced, pickled, inspected: what torch's functions look like to a script."""

import functools
import inspect
import json
import os
import pickle

import torch
import torch.jit._builtins as jb
import torch.nn.parallel.comm as comm
from torch.utils.data import DataLoader

out = {}


def probe(name, fn):
    try:
        out[name] = repr(fn())
    except BaseException as exc:
        out[name] = f"raised {type(exc).__name__}"


public = {
    "torch.tensor": torch.tensor,
    "torch.as_tensor": torch.as_tensor,
    "torch.autograd.grad": torch.autograd.grad,
    "torch.autograd.backward": torch.autograd.backward,
    "torch.Tensor.backward": torch.Tensor.backward,
    "torch.compile": torch.compile,
    "torch.cuda.synchronize": torch.cuda.synchronize,
    "torch.cuda.is_available": torch.cuda.is_available,
    "torch.cuda.device_count": torch.cuda.device_count,
    "torch.accelerator.is_available": torch.accelerator.is_available,
    "torch.accelerator.device_count": torch.accelerator.device_count,
    "comm.broadcast": comm.broadcast,
    "comm.broadcast_coalesced": comm.broadcast_coalesced,
    "comm.reduce_add": comm.reduce_add,
    "comm.scatter": comm.scatter,
    "comm.gather": comm.gather,
    "torch.cuda.Stream.synchronize": torch.cuda.Stream.synchronize,
    "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
}

for name, fn in public.items():
    probe(f"{name} signature", lambda fn=fn: str(inspect.signature(fn)))
    probe(f"{name} pickle", lambda fn=fn: pickle.loads(pickle.dumps(fn)) is fn)
    probe(f"{name} builtin", lambda fn=fn: jb._find_builtin(fn))
    probe(f"{name} module", lambda fn=fn: (fn.__module__, fn.__qualname__, type(fn).__name__))
    probe(f"{name} wraps", lambda fn=fn: functools.wraps(fn)(lambda *a: 0).__wrapped__ is fn)
probe("identity tensor", lambda: torch.tensor is torch._C._VariableFunctions.tensor)
probe(
    "identity grad",
    lambda: torch.autograd.grad is __import__("torch.autograd", fromlist=["grad"]).grad,
)


def scripted():
    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.tensor([1.0, 2.0]) + torch.as_tensor([3.0, 4.0])
        g = torch.autograd.grad([(x * x).sum()], [x])[0]
        assert g is not None
        return g + y.sum()

    x = torch.ones(2, requires_grad=True)
    return f(x).tolist()


probe("script", scripted)


def scripted_cuda():
    @torch.jit.script
    def f() -> int:
        return int(torch.cuda.is_available()) + torch.cuda.device_count()

    return f()


probe("script cuda", scripted_cuda)


def scripted_sync():
    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.cuda.synchronize()
        return x

    return f(torch.ones(1)).tolist()


probe("script sync", scripted_sync)


def traced():
    def g(x):
        y = torch.tensor([1.0, 2.0], dtype=x.dtype) * x + torch.as_tensor([3.0, 4.0])
        torch.cuda.is_available()
        return y

    t = torch.jit.trace(g, torch.ones(2))
    return t(torch.full((2,), 2.0)).tolist()


probe("trace", traced)


def ignored():
    @torch.jit.ignore
    def h(x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor(1.0)

    @torch.jit.script
    def f(x: torch.Tensor) -> torch.Tensor:
        return h(x)

    return f(torch.ones(1)).tolist()


probe("ignore", ignored)


def backward_grad():
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    torch.autograd.backward([(w * 3).sum()])
    return w.grad.tolist(), torch.autograd.grad((w * w).sum(), w)[0].tolist()


probe("backward", backward_grad)
probe("loader", lambda: [b.tolist() for b in DataLoader(list(range(4)), batch_size=2)])
json.dump(out, open(os.environ["USERFNS_OUT"], "w"), indent=1, sort_keys=True)
