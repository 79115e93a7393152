"""Started by torchrun (2 ranks) from tests/distributed/test_faults.py: rank 1 never reaches
the call ("never") or dies between forward and backward ("between"); rank 0 must end with
RankFailure and its process must exit, so that torchrun ends the job. The process group has
torch's default timeout (30 minutes): only attnlab's ``timeout=`` may bound the wait."""

import os
import sys
import time

import torch
import torch.distributed as dist

from attnlab.distributed import ring_attention

mode, timeout = sys.argv[1], float(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
q = torch.randn(1, 2, 8, 4, requires_grad=True)
print(f"rank {rank} start {time.time():.3f}", flush=True)
if mode == "never" and rank == 1:
    time.sleep(600)
out = ring_attention(q, q, q, causal=True, timeout=timeout)
if mode == "between" and rank == 1:
    os._exit(9)
out.sum().backward()
print(f"rank {rank} finished", flush=True)
