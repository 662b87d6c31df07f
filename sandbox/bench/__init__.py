"""What each communication primitive costs here, with nccl-tests' definitions, and the machine's limit beside it.

    python -m sandbox.bench --quick                    # n = 2, 4; 4 B .. 64 MiB; 5 iterations (under 2 minutes here)
    python -m sandbox.bench -n 2,4,8 --ops all_reduce,all_gather --sizes 4,1K,1M,64M --iters 20
    python -m sandbox.bench --gpu -n 2                 # NCCL, one GPU per rank, sizes up to 1 GiB
    python -m sandbox.bench --quick --json             # every point's fields, for machines
    python -m sandbox.bench --quick --advice --plot out/   # + the advice as ratios, + PNGs (latency, busbw vs size)
    python -m sandbox.bench --nnodes 2 --nproc-per-node 2 --cap 1gbit   # simulated nodes (root): inside vs across

One `launch` per world size: its rank function sweeps every op and size, so a sweep costs one torch import per world
size, not one per point. Each point: warm-up calls, then K timed calls; before each call a barrier lines the ranks up,
and `time.perf_counter` brackets the call alone (on GPU, with a `cuda.synchronize` inside the bracket). A call's time
is the slowest rank's (the per-iteration times are all_reduced with MAX), because a collective is done only when
every rank is done. Reported: the median and the p10-p90 spread of those K times.

The size of a point is nccl-tests' (PERFORMANCE.md there), in bytes of float32:
    all_reduce, broadcast, reduce   the buffer each rank holds
    all_gather, gather              the gathered result (n chunks of size/n); the input of a rank is size/n
    reduce_scatter                  the input of a rank (n chunks); each rank's output is size/n
    all_to_all                      what each rank sends in all (n chunks of size/n)
    send_recv                       what each rank sends: every rank isends to rank+1 and irecvs from rank-1 at once
                                    (nccl-tests' sendrecv; with 2 ranks an exchange)
    barrier                         no data: latency only
A size that does not split into n whole float32 chunks is rounded down to one that does (at least one float per
chunk), and the point reports the size it really used, as nccl-tests does.

algbw = size / time (GB/s, 1e9 bytes/s). busbw = algbw * factor, nccl-tests' factor for the op with n ranks:
all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send_recv 1. gather has no
factor in nccl-tests: we use (n-1)/n, as for its mirror scatter's data movement through the root (n-1 chunks of
size/n cross the root's link), and say so here. busbw is the figure to hold against the hardware's limit.

The limit: in the same run, rank 0 times a copy of a 64 MiB tensor (`dst.copy_(src)`, the other ranks waiting in a
barrier), counting read + write (2 x 64 MiB per copy); on GPU a device-to-device copy. The table gives every busbw as a
fraction of it.

An alpha-beta model (latency = alpha + size / beta) is fitted to each op's points, by least squares on relative
error, and printed with its RMS relative residual: alpha is the per-call cost, beta the bandwidth it tends to.

`--advice` measures the communication-primitives document's advice on 3 and 4 ranks (one more launch each): 64
all_reduces of 4 KiB against one flattened all_reduce (cat, reduce, copy back); a 4 MiB all_reduce then independent
compute against an async all_reduce overlapping that compute; 8 training steps syncing a 1 MiB gradient every step
against every 4th; and the kv-sync bug's cache exchange (8 layers, each rank owning a slice, every rank ending with
all) done pairwise, as a ring, and as one `batch_isend_irecv`. Each is printed as a ratio of medians.

`--nnodes K` (with `--nproc-per-node P`, torchrun's names, and `--cap RATE`) measures on K simulated nodes instead,
in one launch: all_reduce in a group inside a node against a group of the same size across nodes, and a
hierarchical all_reduce against a flat one, as ratios (see `sandbox.bench.multinode`).

The ranks measure inside `sandbox.trace.paused()`: torch.distributed is torch's own there, so the tracer's per-call
cost is not in the figures; a hang inside the sweep is therefore stopped by the run's timeout, not named by the hang
rule.

The package, one job a file: `stats` (the ops, nccl-tests' sizes and factors, a point's statistics, the alpha-beta
fit, the tables), `sweep` (the ranks' timing loop), `advice` (the advice, measured), `multinode` (several simulated
nodes), `plot` (the PNGs), `__main__` (the command line).
"""
from sandbox.bench.advice import ADVICE_N, KV_LAYERS, KV_SIZES, advice, advice_lines
from sandbox.bench.plot import plot
from sandbox.bench.stats import (ALIASES, CHUNKED, DEFAULT_SIZES_CPU, DEFAULT_SIZES_GPU, FACTORS, GIB, KIB,
                                 MEMCPY_BYTES, MIB, OPS, QUICK_SIZES, point, alpha_beta, bus_factor, fit_table,
                                 fmt_bw, fmt_size, fmt_time, real_size, table)

__all__ = ["ADVICE_N", "ALIASES", "CHUNKED", "DEFAULT_SIZES_CPU", "DEFAULT_SIZES_GPU", "FACTORS", "GIB", "KIB",
           "KV_LAYERS", "KV_SIZES", "MEMCPY_BYTES", "MIB", "OPS", "QUICK_SIZES", "advice", "advice_lines",
           "alpha_beta", "bus_factor", "fit_table", "fmt_bw", "fmt_size", "fmt_time", "plot", "real_size", "table"]
