"""GPU tests of the Python package under PyTorch: skipped, visibly, without torch or a GPU."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the package's torch tests need it")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the package's GPU tests skip", allow_module_level=True)
