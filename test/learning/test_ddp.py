"""DistributedDataParallel over 2 gloo processes = 1 process on the same batch."""

import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from diffusion_policy_ros.ros.processes import stop_process

sys.path.insert(0, str(Path(__file__).parent))
from ddp_case import make_inputs, make_model  # noqa: E402

WORKER = Path(__file__).parent / "ddp_worker.py"


def test_two_gloo_processes_average_to_the_single_process_gradient(tmp_path):
    model = make_model()
    batch, noise, steps = make_inputs()
    model.compute_loss(batch, noise, steps).backward()
    reference = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    out = tmp_path / "grads.safetensors"
    store = tmp_path / "rendezvous"
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(rank), "2", str(store), str(out)])
             for rank in range(2)]
    try:
        assert [p.wait(timeout=180) for p in procs] == [0, 0]
    finally:
        for p in procs:
            stop_process(p)
    ddp_grads = load_file(str(out))
    assert set(ddp_grads) == set(reference)
    for name, grad in reference.items():
        torch.testing.assert_close(ddp_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
