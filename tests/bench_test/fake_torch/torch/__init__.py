"""A stand-in for the few PyTorch calls examples/pytorch/*.py make, so that tests can drive those
programs (and bench/gpu/eval.py's PyTorch workers) on a machine without PyTorch or a GPU. Nothing
is computed: a forward pass, a backward pass, a GEMM sleep FAKE_TORCH_MS milliseconds (default 1),
so the programs' loops, command protocol and timing logic run as they would."""
import contextlib
import os
import time

_MS = float(os.environ.get("FAKE_TORCH_MS", "1"))
bfloat16, float32 = "bfloat16", "float32"


def _work(scale=1.0):
    time.sleep(_MS * scale / 1000.0)


class Tensor:
    def __init__(self, shape, dtype=float32):
        self.shape, self.dtype = tuple(shape), dtype

    def cuda(self):
        return self

    def to(self, dtype):
        return Tensor(self.shape, dtype)

    def backward(self):
        _work(2)


def randn(*shape, device=None, dtype=float32, generator=None):
    return Tensor(shape, dtype)


def randint(low, high, shape, device=None):
    return Tensor(shape)


def empty(*shape, device=None, dtype=float32):
    return Tensor(shape, dtype)


def matmul(a, b, out=None):
    _work()
    return out if out is not None else Tensor((a.shape[0], b.shape[1]), a.dtype)


def manual_seed(seed):
    return Generator().manual_seed(seed)


def compile(model):
    return model


def inference_mode():
    return contextlib.nullcontext()


class Generator:
    def __init__(self, device=None):
        self.device = device

    def manual_seed(self, seed):
        return self


class Module:
    """What torchvision/transformers models are used for: moved, switched, called."""

    def __init__(self, config=None):
        self.config = config

    def cuda(self):
        return self

    def eval(self):
        return self

    def train(self):
        return self

    def parameters(self):
        return []

    def __call__(self, inputs):
        _work()
        return Tensor(inputs.shape)


class _Cuda:
    class Stream:
        def wait_stream(self, other):
            pass

    class CUDAGraph:
        def replay(self):
            _work()

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def current_stream():
        return _Cuda.Stream()

    @staticmethod
    def stream(s):
        return contextlib.nullcontext()

    @staticmethod
    def graph(g):
        return contextlib.nullcontext()


class _Nn:
    Module = Module

    class CrossEntropyLoss:
        def __call__(self, output, labels):
            return Tensor(())


class _Optim:
    class SGD:
        def __init__(self, params, lr, momentum=0.0):
            pass

        def zero_grad(self, set_to_none=True):
            pass

        def step(self):
            pass


cuda, nn, optim = _Cuda, _Nn, _Optim
