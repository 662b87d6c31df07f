"""The two source readers behind the `group_rank` and `data_order` warnings, on small programs that separate what
each claims from what it must not: which numbering a rank number was made in (`sandbox.diagnose.spaces`) and
whether a collective's order or tensor follows a container each rank ordered its own way
(`sandbox.diagnose.positions`). Parsing only, no run: the blind sets in test_rank_cases hold them on real runs."""
import textwrap

import pytest

from sandbox.diagnose import positions, spaces

HEAD = "import torch\nimport torch.distributed as dist\n"


def _write(tmp_path, body: str, name="prog.py"):
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(body))
    return str(path)


def _line(path: str, text: str) -> int:
    return next(i for i, line in enumerate(open(path).read().splitlines(), 1) if text in line)


@pytest.mark.parametrize("body, call, arg, kind", [
    # global ranks: get_rank() with no group, get_process_group_ranks, get_global_rank, RANK, through min/+1
    ("g = dist.new_group([1, 3])\nleader = min(dist.get_process_group_ranks(g))\n"
     "dist.broadcast(t, group_src=leader, group=g)\n", "dist.broadcast", "group_src", "global"),
    ("import os\nme = int(os.environ['RANK'])\ndist.send(t, dst=me + 1, group=g)\n", "dist.send", "dst", "global"),
    ("rank, world = dist.get_rank(), dist.get_world_size()\ndist.recv(t, src=rank - 1, group=g)\n",
     "dist.recv", "src", "global"),
    # ranks within a group: get_rank(g), get_group_rank, g.rank(), around a ring by its size
    ("me = dist.get_rank(g)\ndist.broadcast(t, (me + 1) % len(order), group=g)\n", "dist.broadcast", "src", "group"),
    ("owner = dist.get_group_rank(g, 2)\ndist.reduce(t, dst=owner, group=g)\n", "dist.reduce", "dst", "group"),
    ("def share(t, group, root):\n    dist.broadcast(t, src=root, group=group)\n\n"
     "share(t, g, g.rank())\n", "dist.broadcast(t, src=root", "src", "group"),
    # a number written in the source takes the kind of what the program compares it with
    ("AGG = 1\ndist.reduce(t, dst=AGG, group=g)\nif dist.get_rank(g) == AGG:\n    pass\n",
     "dist.reduce", "dst", "group"),
])
def test_the_numbering_a_rank_was_made_in_is_read(tmp_path, body, call, arg, kind):
    path = _write(tmp_path, body)
    op = call.split("(")[0].split(".")[-1]
    found = spaces.root_space(f"{path}:{_line(path, call)}", op, arg)
    assert found is not None and found["space"] == kind, found


@pytest.mark.parametrize("body, call, arg", [
    ("dist.broadcast(t, src=0, group=g)\n", "dist.broadcast", "src"),              # a number: no kind
    ("dist.broadcast(t, src=dist.get_rank() % 2, group=g)\n", "dist.broadcast", "src"),  # a parity, not a rank
    ("dist.broadcast(t, src=dist.get_rank() // 2, group=g)\n", "dist.broadcast", "src"),
    ("dist.broadcast(t, src=self.root, group=g)\n", "dist.broadcast", "src"),      # made where the file cannot see
    ("r = dist.get_rank() if x else dist.get_rank(g)\ndist.broadcast(t, src=r, group=g)\n", "dist.broadcast", "src"),
    ("AGG = 1\ndist.reduce(t, dst=AGG, group=g)\n", "dist.reduce", "dst"),         # never compared with a rank
])
def test_no_numbering_is_claimed_where_the_source_does_not_show_one(tmp_path, body, call, arg):
    path = _write(tmp_path, body)
    op = call.split("(")[0].split(".")[-1]
    assert spaces.root_space(f"{path}:{_line(path, call)}", op, arg) is None


SHARD = "rank, world = dist.get_rank(), dist.get_world_size()\nshard = DATA[rank::world]\n"


@pytest.mark.parametrize("body, call, op, filled", [
    # a dict filled in the order the rank's share met its keys, stacked and all_reduced
    (SHARD + "stats = {}\nfor k, v in shard:\n    stats[k] = v\ndist.all_reduce(torch.stack(list(stats.values())))\n",
     "dist.all_reduce", "all_reduce", "stats[k] = v"),
    # through a second list filled in a loop over the first
    (SHARD + "d = {}\nfor k, v in shard:\n    d.setdefault(k, v)\nnames, rows = [], []\nfor k, v in d.items():\n"
     "    rows.append(v)\ndist.reduce(torch.stack(rows), dst=0)\n", "dist.reduce", "reduce", "rows.append(v)"),
    # a loop of collectives over a dict ordered so: any collective, one per key
    (SHARD + "seen = []\nfor k, v in shard:\n    if k not in seen:\n        seen.append(k)\nfor k in seen:\n"
     "    dist.all_gather(out, t)\n", "dist.all_gather", "all_gather", "seen.append(k)"),
    # sorted by the rank's own values
    (SHARD + "norm = {n: sum(shard) for n in NAMES}\nfor n in sorted(norm, key=lambda n: norm[n]):\n"
     "    dist.all_reduce(t)\n", "dist.all_reduce", "all_reduce", "sorted(norm"),
])
def test_an_order_of_the_ranks_own_is_found(tmp_path, body, call, op, filled):
    path = _write(tmp_path, body)
    found = positions.data_order(f"{path}:{_line(path, call)}", op)
    assert found is not None and filled in found["fill"], found


@pytest.mark.parametrize("body, call, op", [
    # sorted keys: one order everywhere
    (SHARD + "stats = {}\nfor k, v in shard:\n    stats[k] = v\n"
     "dist.all_reduce(torch.stack([stats[k] for k in sorted(stats)]))\n", "dist.all_reduce", "all_reduce"),
    # a fixed list of keys, filled in its own order
    (SHARD + "stats = {}\nfor k in KEYS:\n    stats[k] = torch.zeros(1)\n"
     "dist.all_reduce(torch.stack(list(stats.values())))\n", "dist.all_reduce", "all_reduce"),
    # a reduction over the container: no order left in what is sent
    (SHARD + "rows = []\nfor k, v in shard:\n    rows.append(v)\ndist.all_reduce(torch.stack(rows).sum(0))\n",
     "dist.all_reduce", "all_reduce"),
    # an all_gather of a shard's rows: each rank's block is its own by design
    (SHARD + "rows = []\nfor k, v in shard:\n    rows.append(v)\ndist.all_gather(out, torch.stack(rows))\n",
     "dist.all_gather", "all_gather"),
    # keys decided under an if on the rank (which keys, not their order): not claimed here
    (SHARD + "stats = {}\nif rank == 0:\n    stats['x'] = t\ndist.all_reduce(torch.stack(list(stats.values())))\n",
     "dist.all_reduce", "all_reduce"),
])
def test_one_order_everywhere_is_not_claimed(tmp_path, body, call, op):
    path = _write(tmp_path, body)
    assert positions.data_order(f"{path}:{_line(path, call)}", op) is None


def test_a_container_read_only_for_its_truth_or_size_gives_no_order(tmp_path):
    """`np.mean(rows) if rows else 0`: the mean has no order of `rows`, and the test only picks a branch."""
    path = _write(tmp_path, SHARD + "rows = []\nfor k, v in shard:\n    rows.append(v)\n"
                  "m = np.mean(rows) if rows else 0\ntotal = torch.tensor(m * len(rows))\ndist.all_reduce(total)\n")
    assert positions.data_order(f"{path}:{_line(path, 'dist.all_reduce')}", "all_reduce") is None
