# case: objects_bcast_list_len
# class: objects
# names: mismatch
# world: 3
# culprits: 0
# cause: dist.broadcast_object_list, line 33
# nccl: yes
"""At start-up rank 0 reads the run configuration and broadcasts it with broadcast_object_list; the other ranks
pass a placeholder list of N_CONFIG_ITEMS Nones. A third item (the tokenizer settings) was added to what rank 0
loads, but the placeholder length was not updated. broadcast_object_list requires lists of equal length on every
rank: it first broadcasts one size per list element, so rank 0 sends 3 sizes into 2-element receive buffers and
gloo aborts ranks 1 and 2 with a size mismatch. From: https://github.com/Ascend/pytorch/issues/58 (the idiom
"all ranks' list lengths must be equal"; torch.distributed docs: "each rank must provide lists of equal sizes")"""
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
    config = load_run_config() if rank == 0 else [None] * N_CONFIG_ITEMS
    dist.broadcast_object_list(config, src=0)
    optim, data = config[0], config[1]
    assert optim["lr"] == 3e-4 and data["seq_len"] == 2048, f"rank {rank}: bad config {config}"
    print(f"rank {rank}: lr={optim['lr']} seq_len={data['seq_len']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
