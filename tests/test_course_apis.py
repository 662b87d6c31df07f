"""PyTorch's own APIs for what the build-it labs write by hand (sandbox/course/apis.py), on real gloo ranks on the
CPU: FSDP2's fully_shard trains lab 23's model to the same weights as one process, on 4, 3 and 8 ranks, its
parameters DTensors sharded on dim 0; DTensor's parallelize_module splits lab 24's MLP to the same values and
gradients as the unsplit one, on 2, 4 and 8 ranks."""
from sandbox import lab
from sandbox.course import apis
from sandbox.course import sharding as sh
from sandbox.course import tensor_parallel as tp


def fsdp2_placements() -> list:
    """On a rank: how fully_shard lays out lab 23's first Linear's weight (the DTensor's placements, local shape)."""
    from torch.distributed.fsdp import fully_shard

    sh.setup()
    model = sh.make_model()
    fully_shard(model[0], mesh=apis._cpu_mesh())
    w = model[0].weight
    return [(type(p).__name__, getattr(p, "dim", None)) for p in w.placements] + [list(w.to_local().shape),
                                                                                 list(w.shape)]


def test_fsdp2_trains_lab_23s_model_as_one_process_does(clean):
    c = lab.check(apis.fsdp2, n=(4, 3, 8), reference=sh.reference, show=False)
    assert c.ok and c.verdict == "right", c.message
    assert "and the same on 3 and 8 ranks" in c.message
    placed = lab.check(fsdp2_placements, n=4, show=False)
    assert placed.ok, placed.message
    assert placed.result.values[0] == [("Shard", 0), [4, 8], [16, 8]]  # 16 rows of 8 over 4 ranks


def test_dtensor_tensor_parallelism_matches_the_unsplit_mlp_and_the_labs_reference_solution(clean):
    c = lab.check(apis.tensor_parallel, n=(2, 4, 8), reference=tp.reference, show=False)
    assert c.ok and c.verdict == "right", c.message
    mine = lab.check(tp.tp_mlp, n=4, show=False)
    torch_s = lab.check(apis.tensor_parallel, n=4, show=False)
    import torch
    for a, b in zip(mine.result.values, torch_s.result.values):
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_ddp_trains_lab_22s_model_as_one_process_does(clean):
    from sandbox.course import data_parallel as dp

    c = lab.check(apis.ddp, n=(4, 3, 8), reference=dp.reference, show=False)
    assert c.ok and c.verdict == "right", c.message


def test_torch_pipelining_gives_lab_25s_gradients_and_refuses_fewer_micro_batches_than_stages(clean):
    """GPipe and 1F1B by torch.distributed.pipelining give each stage the single-process gradients; its 1F1B
    refuses m < p, which lab 25 quotes (the lab's own schedules take m = 2 on 4 stages)."""
    import json
    import os

    from conftest import ROOT

    from sandbox.course import pipeline as pp

    for schedule, m in (("gpipe", 4), ("1f1b", 8)):
        c = lab.check(apis.pipeline, n=4, kwargs={"schedule": schedule, "m": m},
                      reference=lambda n, schedule, m: pp.reference(n, m), show=False)
        assert c.ok, (schedule, m, c.message)
    c = lab.check(apis.pipeline, n=4, kwargs={"schedule": "1f1b", "m": 2}, show=False)
    said = "Number of microbatches (2) must be greater than or equal to the number of stages (4)"
    assert not c.ok and said in c.message, c.message
    nb = json.load(open(os.path.join(ROOT, "labs", "25_pipeline.ipynb")))
    assert any(said in "".join(cell["source"]) for cell in nb["cells"])


def test_a_2d_mesh_of_data_and_tensor_parallelism_matches_one_process(clean):
    """Lab 24's MLP on a 2-D DeviceMesh: 2-way TP inside each replica, FSDP2 over 2 (then 4) replicas, each on its
    share of the batch: every parameter's whole gradient is one process's on the whole batch."""
    for n, dp in ((4, 2), (8, 4)):
        c = lab.check(apis.dp_tp, n=n, kwargs={"dp": dp}, reference=apis.dp_tp_reference, show=False)
        assert c.ok, (n, dp, c.message)
    c = lab.check(apis.dp_tp, n=4, kwargs={"dp": 3}, show=False)
    assert not c.ok and "4 ranks do not split into 3 data-parallel replicas" in c.message, c.message
