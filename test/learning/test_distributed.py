import torch

from diffusion_policy_ros.learning.distributed import (
    ProcessRank,
    init_distributed,
    training_precision,
)


def test_one_process_joins_no_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rank, device = init_distributed("cpu")
    assert rank == ProcessRank() and rank.main
    assert device == torch.device("cpu")
    assert not torch.distributed.is_initialized()


def test_auto_precision_is_fp32_on_the_cpu_and_bf16_on_cuda():
    assert training_precision("auto", torch.device("cpu")) == "fp32"
    assert training_precision("auto", torch.device("cuda", 0)) == "bf16"
    assert training_precision("fp16", torch.device("cpu")) == "fp16"
