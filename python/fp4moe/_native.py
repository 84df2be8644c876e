"""Loads the native library (libfp4moe_native.so, beside this file) through
tvm-ffi and exposes its global functions ``fp4moe.*``."""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib

import tvm_ffi

_HERE = pathlib.Path(__file__).resolve().parent


def _preload_cublas() -> None:
    # The library links cuBLAS (the on-device router). A CUDA toolkit on the
    # loader's path provides it; PyTorch's nvidia-cublas wheel may instead.
    try:
        import nvidia.cublas  # type: ignore[import-not-found]

        lib = pathlib.Path(list(nvidia.cublas.__path__)[0]) / "lib"
        for name in ("libcublasLt.so.13", "libcublas.so.13"):
            if (lib / name).exists():
                ctypes.CDLL(str(lib / name), mode=ctypes.RTLD_GLOBAL)
    except ImportError:
        pass


def _library_path() -> pathlib.Path:
    override = os.environ.get("FP4MOE_NATIVE_LIBRARY")
    if override:
        return pathlib.Path(override)
    return _HERE / "libfp4moe_native.so"


_preload_cublas()
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
