"""`seeded.hash_order` reads from the source whether a call's order (or a value it takes) comes from iterating a
set; what it must not call one: sorted sets, sets of numbers, dicts, lists, ranges."""
import textwrap

import pytest

from sandbox import seeded

HEAD = "import torch.distributed as dist\n"


def _found(tmp_path, body: str):
    path = tmp_path / "job.py"
    src = HEAD + textwrap.dedent(body)
    path.write_text(src)
    line = next(i for i, text in enumerate(src.splitlines(), 1) if "dist." in text and "import" not in text)
    return seeded.hash_order(f"{path}:{line}")


@pytest.mark.parametrize("body, the_set", [
    ("for n in {'a.weight', 'b.bias'}:\n    dist.all_reduce(n)\n", "{'a.weight', 'b.bias'}"),
    ("names = set(params)\nfor n in list(names):\n    dist.all_reduce(n)\n", "names"),
    ("keep = frozenset(n for n in params if n)\nfor i, n in enumerate(keep):\n    dist.all_reduce(n)\n", "keep"),
    ("a = set(x)\nb = set(y)\nfor group in (a, b):\n    for n in group:\n        dist.all_reduce(n)\n", "a"),
    ("t = set(x)\nbuckets = make_buckets(t)\nfor b in buckets:\n    dist.all_reduce(b)\n", "t"),
    ("s = set(x)\n[dist.broadcast(n, 0) for n in s | {'extra'}]\n", "s | {'extra'}"),
    ("ls = set(x)\nowner = {k: i % 4 for i, k in enumerate(ls)}\nfor n in named:\n"
     "    dist.broadcast(n, src=owner[n])\n", "ls"),
])
def test_a_call_in_a_sets_order_is_found_with_the_set_to_sort(tmp_path, body, the_set):
    found = _found(tmp_path, body)
    assert found is not None and found["set"] == the_set, found


@pytest.mark.parametrize("body", [
    "names = set(params)\nfor n in sorted(names):\n    dist.all_reduce(n)\n",
    "for i in {1, 2, 3}:\n    dist.all_reduce(i)\n",
    "d = {'a': 1}\ne = {'b': 2}\nfor k in d | e:\n    dist.all_reduce(k)\n",
    "for n in ['a', 'b']:\n    dist.all_reduce(n)\n",
    "for i in range(world - 1):\n    dist.all_reduce(i)\n",
    "for n, p in model.named_parameters():\n    dist.all_reduce(p)\n",
    "s = set(x)\nn = len(s)\nfor i in range(n):\n    dist.all_reduce(i)\n",
])
def test_an_order_that_is_the_same_in_every_process_is_not_called_a_sets(tmp_path, body):
    assert _found(tmp_path, body) is None


@pytest.mark.parametrize("body, value", [
    ("owner = {n: hash(n) % world for n in names}\nfor n in names:\n    dist.broadcast(t, src=owner[n])\n", "owner"),
    ("root = abs(hash(model_name)) % 4\ndist.broadcast(t, src=root)\n", "root"),
])
def test_a_value_made_by_the_builtin_hash_of_a_name_is_found(tmp_path, body, value):
    found = _found(tmp_path, body)
    assert found is not None and found["value"] == value and found["hash"].startswith("hash("), found


@pytest.mark.parametrize("body", [
    "root = hash(7) % 4\ndist.broadcast(t, src=root)\n",          # a constant: the same in every process
    "root = zlib.crc32(name.encode()) % 4\ndist.broadcast(t, src=root)\n",
])
def test_a_hash_of_a_constant_or_a_stable_hash_is_not(tmp_path, body):
    assert _found(tmp_path, body) is None
