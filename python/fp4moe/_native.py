"""Loads the native library (libfp4moe_native.so, beside this file) through
tvm-ffi and exposes its global functions ``fp4moe.*``."""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib

import tvm_ffi

_HERE = pathlib.Path(__file__).resolve().parent


def _preload(package: str, names) -> None:
    # The library links cuBLAS (the on-device router) and NCCL (the parallel
    # layer). A CUDA toolkit on the loader's path provides them; PyTorch's
    # nvidia-* wheels may instead, and then the process must hold one NCCL:
    # a communicator made by torch.distributed is used through the same library.
    try:
        mod = __import__(package, fromlist=["__path__"])
    except ImportError:
        return
    for root in mod.__path__:
        for name in names:
            if (pathlib.Path(root) / "lib" / name).exists():
                ctypes.CDLL(str(pathlib.Path(root) / "lib" / name), mode=ctypes.RTLD_GLOBAL)


def _library_path() -> pathlib.Path:
    override = os.environ.get("FP4MOE_NATIVE_LIBRARY")
    if override:
        return pathlib.Path(override)
    return _HERE / "libfp4moe_native.so"


_preload("nvidia.cublas", ("libcublasLt.so.13", "libcublas.so.13"))
_preload("nvidia.nccl", ("libnccl.so.2",))
_path = _library_path()
if not _path.exists():
    raise ImportError(f"fp4moe: the native library {_path} is missing (install the package with pip install .)")
_module = tvm_ffi.load_module(str(_path))


@functools.lru_cache(maxsize=None)
def fn(name: str):
    """The global function ``fp4moe.<name>`` of the native library (looked up once)."""
    return tvm_ffi.get_global_func("fp4moe." + name)


@tvm_ffi.register_object("fp4moe.Layer")
class NativeLayer(tvm_ffi.Object):
    """The C++ MoeLayer; use fp4moe.MoeLayer."""


@tvm_ffi.register_object("fp4moe.ParallelLayer")
class NativeParallelLayer(tvm_ffi.Object):
    """The C++ ParallelMoeLayer; use fp4moe.ParallelMoeLayer."""
