# case: objects_bcast_list_len
# fixed: the whole config list is broadcast as ONE object in a 1-element list, so its length no longer matters
# world: 3
# nccl: yes
"""At start-up rank 0 reads the run configuration and broadcasts it with broadcast_object_list. The config list is
wrapped as a single object, so every rank passes a 1-element list whatever the number of config items. From:
https://github.com/Ascend/pytorch/issues/58"""
import datetime

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
N_CONFIG_ITEMS = 2


def load_run_config():
    optim = {"lr": 3e-4, "betas": (0.9, 0.95)}
    data = {"seq_len": 2048, "micro_batch": 4}
    tokenizer = {"vocab_size": 32000, "pad_id": 0}
    return [optim, data, tokenizer]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    box = [load_run_config() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    config = box[0]
    optim, data = config[0], config[1]
    assert optim["lr"] == 3e-4 and data["seq_len"] == 2048, f"rank {rank}: bad config {config}"
    print(f"rank {rank}: lr={optim['lr']} seq_len={data['seq_len']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
