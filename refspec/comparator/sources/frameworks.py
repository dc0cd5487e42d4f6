"""How an implementation's functions receive a case's inputs and give back their results:
NumPy arrays, or PyTorch tensors on a device (docs/run.md, "Frameworks").

Both directions are lossless: a tensor holds exactly the stored bits (bfloat16 included, moved as
its 16-bit patterns), and a result comes back in the dtype it was computed in. PyTorch is
imported only when the torch framework is asked for.
"""

from __future__ import annotations

import numpy as np

from ...inputs.tensor_files import CODE_DTYPES
from ...spec.dtypes import bfloat16, dtype_name
from ...spec.errors import one_line

__all__ = ["FRAMEWORKS", "FrameworkError", "NumpyFramework", "TorchFramework", "framework"]

FRAMEWORKS = ("numpy", "torch")


class FrameworkError(ValueError):
    """A framework that cannot be used as asked (PyTorch missing, an unknown device, ...)."""


class NumpyFramework:
    """Inputs as NumPy arrays in the case dtype (``ml_dtypes.bfloat16`` for bfloat16)."""

    name = "numpy"
    device = "cpu"
    autograd = False

    def tensor(self, array: np.ndarray, requires_grad: bool = False):
        return np.array(array)                # a copy: the implementation may write into it

    def array(self, value) -> np.ndarray:
        return np.asarray(value)

    def synchronize(self) -> None:
        pass


class TorchFramework:
    """Inputs as ``torch.Tensor`` on ``device`` (any device string torch accepts: cpu, cuda,
    cuda:1, npu, ...); results are copied back to the host."""

    name = "torch"
    autograd = True

    def __init__(self, device: str = "cpu"):
        try:
            import torch
        except ImportError:
            raise FrameworkError("--framework torch needs PyTorch (pip install torch; for an "
                                 "Ascend NPU also torch_npu)") from None
        self.torch = torch
        try:
            self._device = torch.device(device)
            torch.empty(0, device=self._device)
        except Exception as exc:              # RuntimeError: unknown or unavailable device
            raise FrameworkError(f"device {device!r} cannot be used by torch: "
                                 f"{one_line(exc)}") from None
        self.device = str(self._device)

    def tensor(self, array: np.ndarray, requires_grad: bool = False):
        torch = self.torch
        array = np.ascontiguousarray(array)
        if array.dtype == bfloat16:
            t = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
        elif array.dtype in CODE_DTYPES:      # torch's float8 dtypes; HiFloat8 as its bytes
            t = torch.from_numpy(array.view(np.uint8).copy())
            name = dtype_name(array.dtype)
            if hasattr(torch, name):
                t = t.view(getattr(torch, name))
        else:
            t = torch.from_numpy(array.copy())
        t = t.to(self._device)
        return t.requires_grad_(True) if requires_grad else t

    def array(self, value) -> np.ndarray:
        torch = self.torch
        if not isinstance(value, torch.Tensor):
            return np.asarray(value)
        t = value.detach().to("cpu")
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(bfloat16)
        code = next((d for d in CODE_DTYPES if getattr(torch, dtype_name(d), None) == t.dtype), None)
        if code is not None:
            return t.contiguous().view(torch.uint8).numpy().view(code)
        return t.numpy()

    def synchronize(self) -> None:
        module = getattr(self.torch, self._device.type, None)
        if self._device.type != "cpu" and hasattr(module, "synchronize"):
            module.synchronize()

    def backward(self, outputs: list, grads: list) -> None:
        self.torch.autograd.backward(outputs, grads)

    def grad(self, leaf):
        return leaf.grad

    def zeros_like(self, leaf):
        return self.torch.zeros_like(leaf.detach())


def framework(name: str, device: str | None = None):
    """The framework ``name`` (numpy or torch) on ``device``."""
    if name == "numpy":
        if device not in (None, "cpu"):
            raise FrameworkError(f"--device {device} needs --framework torch (NumPy runs on the CPU)")
        return NumpyFramework()
    if name == "torch":
        return TorchFramework(device or "cpu")
    raise FrameworkError(f"unknown framework {name!r}; allowed: {', '.join(FRAMEWORKS)}")
