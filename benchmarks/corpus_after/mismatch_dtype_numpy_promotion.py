# case: mismatch_dtype_numpy_promotion
# class: mismatch/dtype
# names: mismatch
# world: 2
# culprits: 1
# cause: dist.all_reduce, line 37
# nccl: yes
"""A MeanMetric accumulates per-sample accuracy in a Python number and all-reduces torch.tensor([state, count]) with
the dtype left to inference. Multi-token samples add np.all(...), a numpy.bool_, which turns the running state into
numpy.float64; rank 1's shard has such a sample, so its tensor is float64 while rank 0's is float32, and the ranks
meet in all_reduce with buffers of different byte sizes; gloo aborts a rank with a size mismatch. From:
https://github.com/modelscope/ms-swift/pull/9551 (fixes ms-swift#9550)"""
import datetime

import numpy as np
import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
SHARDS = {
    0: [([3], [3]), ([5], [4]), ([7], [7]), ([2], [2])],
    1: [([1], [1]), ([4, 2], [4, 2]), ([6], [6]), ([8], [9])],
}


class MeanMetric:
    def __init__(self):
        self.state = 0.0
        self.count = 0

    def update(self, value):
        self.state += value
        self.count += 1

    def compute(self):
        packed = torch.tensor([self.state, self.count])
        dist.all_reduce(packed)
        return (packed[0] / packed[1]).item()


def sample_correct(pred, label):
    if len(label) == 1:
        return float(pred[0] == label[0])
    return np.all(np.array(pred) == np.array(label))


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    acc = MeanMetric()
    for pred, label in SHARDS[rank]:
        acc.update(sample_correct(pred, label))
    value = acc.compute()
    assert abs(value - 0.75) < 1e-6, f"rank {rank}: accuracy {value}"
    print(f"rank {rank}: accuracy {value:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
