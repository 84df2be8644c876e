"""fp4moe.ParallelMoeLayer through torch.distributed's NCCL group: one rank on
one GPU (bitwise the single-GPU layer), and one process per local GPU under
torchrun when there are several (parallel_worker.py holds the checks)."""

import os
import socket
import subprocess
import sys

import pytest
import torch

WORKER = os.path.join(os.path.dirname(__file__), "parallel_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print(p.stdout[-6000:], p.stderr[-3000:])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAIL" not in p.stdout


def test_one_rank():
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), NCCL_NVLS_ENABLE="0")
    run([sys.executable, WORKER], env)


def test_every_local_gpu_under_torchrun():
    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("one GPU here: the torchrun run needs 2 or more (scripts/gpu-run.sh python on a multi-GPU kind)")
    G = 8 if n >= 8 else 4 if n >= 4 else 2
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={G}", f"--master-port={free_port()}",
         WORKER], env)
