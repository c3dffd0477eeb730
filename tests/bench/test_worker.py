"""The memory-sweep worker's device handling (CUDA's own calls are checked by `make gpu-check`)."""

import torch

from sinkflex_lib.bench.worker import with_index


def test_a_bare_cuda_device_gets_the_first_visible_index():
    assert with_index("cuda") == torch.device("cuda", 0)
    assert with_index("cuda:1") == torch.device("cuda", 1)
    assert with_index("cpu") == torch.device("cpu")
