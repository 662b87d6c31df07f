import os, torch, torch.distributed as dist
local = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
objs = [None] * dist.get_world_size()
dist.all_gather_object(objs, {"rewards": torch.rand(3, device=f"cuda:{local}")})
print([o["rewards"].device for o in objs])
torch.stack([o["rewards"] for o in objs])
