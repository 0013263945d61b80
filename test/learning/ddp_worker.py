"""One rank of the DDP gradient check (run by test_ddp.py as its own process).

usage: ddp_worker.py RANK WORLD STORE_FILE OUT.safetensors

Rendezvous through a file store (no port to race for) and gloo on loopback.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(__file__))
from ddp_case import B, make_inputs, make_model  # noqa: E402


def main() -> None:
    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = make_model()
    model.forward = model.compute_loss  # DDP's hooks run on forward()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    batch, noise, steps = make_inputs()
    part = slice(rank * B // world, (rank + 1) * B // world)
    loss = ddp({k: v[part] for k, v in batch.items()}, noise[part], steps[part])
    loss.backward()
    if rank == 0:
        save_file({n: p.grad.contiguous() for n, p in model.named_parameters()
                   if p.grad is not None}, out)
    # Both ranks are done here. Tearing down the gloo group over the file store hung
    # in two of three fresh-clone CI runs (rank 0 gone, rank 1 stuck for the test's
    # 180 s, even after a barrier), so the workers leave without the teardown.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
