"""Per bug, "how to recognise it in your own code": signs to look for in a code base of your own.

Kept here (the site's, not the bug module's): a bug without an entry still gets a page, with the general signs of
its diagnosis kind (`GENERIC`), so adding a bug to the registry never needs an edit of the site.
"""

RECOGNISE = {
    "init-port": [
        "A literal `tcp://host:port` (often `localhost:29500`) in an `init_process_group` call, or in code that "
        "builds `init_method` for some workers only.",
        "Two code paths that start workers (a driver and the others, a first and a restarted worker) that do not "
        "both take the launcher's `MASTER_ADDR`/`MASTER_PORT` (`env://`).",
        "Rank 0 logs that init finished while the other ranks never do, and nothing is said for 30 minutes.",
    ],
    "group-order": [
        "`new_group` inside an `if rank in ...` branch, or in a loop whose order depends on the rank.",
        "Setup functions (tensor-, pipeline-, sequence-parallel groups) called in a different order on some ranks.",
        "Start-up hangs with per-rank logs stuck between `Before new_group` and `After new_group`.",
    ],
    "xpu-device-id": [
        "`init_process_group(..., device_id=...)` on a non-CUDA accelerator (XPU, HPU, ...), followed by "
        "`new_group(backend=\"gloo\")` for CPU work.",
        "Code ported from CUDA/NCCL that kept `device_id=torch.device(<accel>, local_rank)`.",
        "`RuntimeError: No backend type associated with device type ...` raised from `new_group`.",
    ],
    "aux-data": [
        "Metadata written into one block (or one shard) of a buffer and read by every rank from its own block.",
        "Some ranks see zeros where others see the real value, and then take a different branch.",
        "A status synced with a collective, followed by a per-rank decision on data that was not synced.",
    ],
    "kv-sync": [
        "A loop of blocking `dist.send` calls to peers before any `dist.recv` on the same ranks.",
        "Every rank runs the same exchange code that starts with a send (\"send mine, then receive theirs\").",
        "A hang where every rank sits in `send`; it may work for small messages with another backend and hang "
        "with gloo at any size.",
    ],
    "cross-device": [
        "`gather_object` / `all_gather_object` of dicts or lists holding tensors, followed by `torch.stack` / "
        "`torch.cat` of them.",
        "Objects unpickled on another rank keep the device they were created on (`cuda:0`, `cuda:1`, ...).",
        "`Expected all tensors to be on the same device` on some ranks only, in code that gathered from peers.",
    ],
    "resample-desync": [
        "A `while not enough:` loop around generation or data fetching, where `enough` is computed from "
        "this rank's own count.",
        "Collectives (a broadcast of the next batch, a gather into a pool) inside a loop that ranks may leave at "
        "different times.",
        "A deadlock that comes and goes with the data: most steps pass, a step with uneven rejection hangs.",
    ],
    "gather-uneven": [
        "`all_gather` (or `gather`) whose output list is built with `torch.empty_like(mine)` where `mine` has a "
        "length that depends on the rank's data.",
        "Variable-length items per rank (tokens, boxes, samples) gathered without first exchanging the lengths.",
        "A hang, or a gloo `SIGABRT` with `Received data size doesn't match expected size`.",
    ],
    "isend-unwaited": [
        "`dist.isend(...)` whose returned Work is never `wait()`ed (or is dropped: `dist.isend(t, dst)` alone on "
        "a line).",
        "A rank that returns or exits right after an `isend`.",
        "The receiver fails with `Connection closed by peer` or `Connection reset by peer`, or receives nothing.",
    ],
    "ddp-uneven-inputs": [
        "Shards cut by hand (`data[rank::world_size]`, `array_split`) without padding or `drop_last`, so ranks run "
        "different numbers of batches under DDP.",
        "A DDP training loop with no `Join` context (`torch.distributed.algorithms.join.Join`) over data whose "
        "length is not a multiple of the world size.",
        "The last step fails on one rank only (`Connection closed by peer`) or hangs in `loss.backward()`, after "
        "the other ranks have finished.",
    ],
    "ddp-unused-parameters": [
        "A `forward` that calls a submodule only under a condition on the batch (`if images is not None:`, a "
        "routing decision, an optional head).",
        "Outputs of `forward` that do not all reach the loss, under `DistributedDataParallel` without "
        "`find_unused_parameters=True`.",
        "`Expected to have finished reduction in the prior iteration before starting a new one` at the second step, "
        "on some ranks, while the others wait in `backward`.",
    ],
    "ddp-model-differs": [
        "A model whose sizes (a vocabulary, a width, a number of layers) come from data each rank reads on its own, "
        "before `DistributedDataParallel(model)`.",
        "A config file or environment variable read per rank, or a tokenizer built from the rank's own shard.",
        "`appears not to match sizes of the same param in process 0`, or `DDP expects same model across all "
        "ranks`, from DDP's constructor.",
    ],
    "sampler-set-epoch": [
        "A `for epoch in range(...)` loop over a `DataLoader` with a `DistributedSampler(shuffle=True)` and no "
        "`sampler.set_epoch(epoch)` in it.",
        "Per-epoch loss curves that repeat the same shape every epoch, or the same first batch ids logged each epoch.",
        "`set_epoch` called once before the loop, or after the DataLoader's iterator was created.",
    ],
    "no-sync-accumulation": [
        "`model.no_sync()` around all but the last micro-batch, with the number of micro-batches computed from the "
        "rank's own data (tokens, rows, a per-rank batch size).",
        "Ranks that make different numbers of optimizer steps per epoch; a loop of micro-steps with a `len()` of "
        "something rank-local.",
        "One rank fails in `loss.backward()` (`Connection closed by peer`) after the others finished, or a loss that "
        "differs from the single-process run although nothing fails.",
    ],
    "fsdp-wrap-differs": [
        "`fully_shard` (or FSDP's `auto_wrap_policy`) applied by a policy that reads a per-rank value: a threshold "
        "from the environment, a memory measurement, the rank's own device.",
        "A loop `for block in model.blocks: if <condition>: fully_shard(block)` whose condition is not the same "
        "on every rank.",
        "The first forward hangs in FSDP's all_gather or aborts with `Received data size doesn't match expected "
        "size`.",
    ],
    "moe-all-to-all-splits": [
        "`all_to_all_single(..., output_split_sizes=..., input_split_sizes=...)` whose send splits and the counts "
        "exchanged beforehand are computed at two places (before and after a capacity or drop step).",
        "A token-routing step that changes the routing (capacity, dropping, re-routing) after the counts were taken.",
        "Aborts on some batches only, where an expert overflows: `Received data size doesn't match expected size`, "
        "or a hang in `all_to_all_single`.",
    ],
    "checkpoint-timeout": [
        "`if rank == 0: torch.save(...)` followed by `dist.barrier()`, under an `init_process_group(timeout=...)` "
        "shorter than the slowest save.",
        "Every rank but 0 fails at the barrier with `Timed out waiting ...ms for recv operation` (or NCCL's watchdog "
        "timeout) while rank 0 prints nothing: it is still writing.",
        "It happens as the checkpoint grows or the filesystem gets busy: saves that used to pass start to time out.",
    ],
    "mixed-dtype": [
        "`model.to(torch.bfloat16)`, `torch.autocast(dtype=torch.bfloat16)` or a bf16 gradient cast switched on by "
        "a per-rank flag (a device capability, a config read per rank).",
        "Gradients reduced by hand (`dist.all_reduce(p.grad)`) without casting them to one dtype first.",
        "`Received data size doesn't match expected size` with a byte count half the other's (`4 vs 2`), or a hang "
        "in the gradient all_reduce.",
    ],
    "master-addr-localhost": [
        "`os.environ[\"MASTER_ADDR\"] = \"localhost\"` (or `tcp://localhost:...`, `127.0.0.1`) in a script's setup, "
        "often copied from a one-machine tutorial.",
        "A job that works with `--nnodes 1` and hangs in `init_process_group` on every node but the first.",
        "Logs of the second node's ranks stop before `init_process_group` returns; the first node's wait for them.",
    ],
    "local-rank-as-rank": [
        "`init_process_group(rank=local_rank)`, `rank=args.local_rank`, or a `RANK` computed from `LOCAL_RANK`.",
        "A sampler, a checkpoint writer or a logger keyed on `LOCAL_RANK == 0` where one process in the job was "
        "meant (it runs once per node).",
        "Every node's ranks time out in `init_process_group` with `DistStoreError: wait timeout ... keys: "
        "/default_pg/...`.",
    ],
    "hostname-loopback": [
        "`/etc/hosts` on the nodes maps the machine's own name to `127.0.1.1` (Debian and Ubuntu installers write "
        "that line); `getent hosts $(hostname)` prints a loopback address.",
        "`Connection refused, remote=[127.0.1.1]:...` (or `127.0.0.1`) from gloo, only when the job spans nodes.",
        "No `GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME` in the job's environment on machines with several interfaces.",
    ],
    "node-failure": [
        "A multi-node job started without `--max-restarts` (torchrun's default is 0).",
        "No checkpoint loaded at start: a restarted job would begin at step 0.",
        "Survivors fail with `Connection closed by peer` / `Connection reset by peer` (gloo) or an NCCL watchdog "
        "timeout at the same moment, all naming addresses of one machine.",
    ],
}

GENERIC = {
    "collective_mismatch": [
        "A collective inside an `if` that depends on the rank or on rank-local data.",
        "Loops whose number of iterations differs between ranks, with a collective inside.",
    ],
    "missing_ranks": [
        "A collective or barrier that only some ranks reach (an early return, an exception caught on one rank).",
    ],
    "group_mismatch": [
        "`new_group` called by only some ranks, or in a different order, or with different rank lists.",
    ],
    "p2p_cycle": [
        "Blocking `send`s on both sides of a pair before the matching `recv`s; tags that differ between a send "
        "and its recv.",
    ],
    "init_mismatch": [
        "Ranks that build their rendezvous endpoint or world size in different ways.",
    ],
    "rank_error": [
        "An exception on one rank that the others do not see: wrap and re-raise it, or check inputs before the "
        "collective.",
    ],
    None: [
        "Run the script under `python -m sandbox.run -n 4` and read which rank is in which call.",
    ],
}

ALWAYS = ["Run it on a few ranks under `python -m sandbox.run -n 4 your_script.py`: the verdict names the "
          "rank, the call and the line."]


def recognise_list(slug, bug):
    """The signs for one bug: its own list, else the general ones of its diagnosis kind; then the sandbox run."""
    signs = RECOGNISE.get(slug) or GENERIC.get(bug.broken.kind) or GENERIC[None]
    return list(signs) + ALWAYS
