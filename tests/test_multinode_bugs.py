"""The catalogue's bugs across simulated nodes (master-addr-localhost, local-rank-as-rank, hostname-loopback,
node-failure): their records, how they are skipped where nodes cannot be made (root is needed), and the diagnoses that name the node
and the cause, from hand-built traces (the rules alone) and from real runs on 2 nodes of 2 ranks (as root).

Every variant of every bug is also run by tests/test_catalogue.py, which reads them from the registry."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, catalogue_run
from sandbox import nodes
from sandbox.bugs import Bug, Expect, read_bug, registry, unavailable
from sandbox.diagnose import diagnose_failure, diagnose_hang, hosts, progress_possible
from sandbox.events import RankTrack

OK, WHY = nodes.available()
needs_nodes = pytest.mark.skipif(not OK, reason=WHY)
MULTI = ("master-addr-localhost", "local-rank-as-rank", "hostname-loopback", "node-failure")
NO_ROOT = "import os; os.geteuid = lambda: 1000\n"  # what nodes.available() sees as a user without root
T = 120


# ------------------------------------------------------------------------------------------------------ records
def test_the_multinode_bugs_are_in_the_registry_on_two_nodes():
    bugs = registry()
    for slug in MULTI:
        b = bugs[slug]
        assert (b.nnodes, b.world_size, b.where) == (2, 4, "4 ranks on 2 nodes"), slug
        assert b.gpu is None, f"{slug} is gloo-only: NCCL's network transports are not exercised without GPUs"
        assert "Simulated" in b.parts and "needs root" in b.parts["Simulated"], slug
    assert bugs["hostname-loopback"].node_options == {"hostname_loopback": True}
    kv = bugs["kv-sync"]
    assert kv.nnodes == 1 and kv.where == f"{kv.world_size} ranks"  # a bug of one host says nothing more


def test_a_record_s_nodes_must_divide_its_ranks(tmp_path):
    path = tmp_path / "odd.py"
    head = '"""doc"""\nBUG = Bug(slug="odd", title="t", source="s", symptom="s", broken=Expect("hang"), fixed=Expect()'
    path.write_text(head + ', world_size=4, min_world_size=3, nnodes=2)\n')
    with pytest.raises(ValueError, match="must be a whole number that divides world_size and min_world_size"):
        read_bug(str(path), "x.odd")
    path.write_text(head + ', node_options={"hostname_loopback": True})\n')
    with pytest.raises(ValueError, match="node_options only with several nodes"):
        read_bug(str(path), "x.odd")
    path.write_text(head + ', min_world_size=2, nnodes=2, node_options={"hostname_loopback": True})\n')
    bug = read_bug(str(path), "x.odd")
    assert (bug.nnodes, bug.node_options) == (2, {"hostname_loopback": True})


def test_a_bug_of_one_host_is_always_available():
    assert unavailable(Bug(slug="x", title="t", source="s", symptom="s", broken=Expect(), fixed=Expect())) is None


# --------------------------------------------------------------------------------- without root: said and skipped
def _no_root(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_ROOT + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=T, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))


def test_without_root_repro_of_one_says_what_is_needed_and_exits_2():
    p = _no_root("""
        import sys
        from sandbox import repro
        sys.exit(repro.main(["master-addr-localhost"]))
    """)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.strip() == ("sandbox.repro: master-addr-localhost runs on 2 simulated nodes: simulated nodes need"
                                " root (network namespaces and a bridge): run as root, e.g. in a container."), p.stderr


def test_without_root_repro_all_skips_them_with_the_sentence_and_judges_the_rest():
    """The whole catalogue would take minutes: --all is given the four bugs and kv-sync, which runs."""
    p = _no_root("""
        import sys
        from sandbox import repro
        every = repro.registry()
        repro.registry = lambda: {s: every[s] for s in ("kv-sync", "master-addr-localhost", "local-rank-as-rank",
                                                        "hostname-loopback", "node-failure")}
        sys.exit(repro.main(["--all"] + sys.argv[1:]))
    """)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    for slug in MULTI:
        assert f"{slug:22} skipped: simulated nodes need root (network namespaces and a bridge)" \
               f": run as root, e.g. in a container." in lines, p.stdout
    assert sum("kv-sync" in line and "as documented" in line for line in lines) == 2, p.stdout
    assert lines[-1].startswith("2/2 variants as documented in ")
    assert lines[-1].endswith("; 4 bugs skipped for want of simulated nodes"), lines[-1]


def test_without_root_repro_all_json_marks_them_skipped():
    p = _no_root("""
        import sys
        from sandbox import repro
        every = repro.registry()
        repro.registry = lambda: {s: every[s] for s in ("master-addr-localhost", "hostname-loopback")}
        sys.exit(repro.main(["--all", "--json"]))
    """)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [(r["bug"], r["as_documented"], r["skipped"].split(":")[0]) for r in d["runs"]] == [
        ("master-addr-localhost", None, "simulated nodes need root (network namespaces and a bridge)"),
        ("hostname-loopback", None, "simulated nodes need root (network namespaces and a bridge)")]


def test_without_root_a_lab_run_raises_the_sentence():
    p = _no_root("""
        from sandbox import lab
        from sandbox.launcher import UsageError
        try:
            lab.Lab("local-rank-as-rank").run("broken", show=False)
        except UsageError as e:
            print("UsageError:", e)
    """)
    assert p.stdout.strip() == ("UsageError: simulated nodes need root (network namespaces and a bridge): run as root,"
                                " e.g. in a container."), p.stdout + p.stderr


# ------------------------------------------------------------------------------- the rules, from hand-built tracks
def _tracks(calls: dict[int, dict], hosts_: dict[int, str], local: dict[int, int] | None = None,
            errors: dict[int, str] | None = None) -> dict[int, RankTrack]:
    """One init_process_group per rank, on the host given, still pending or (errors) raised."""
    out = {}
    for r, call in calls.items():
        t = out[r] = RankTrack(r)
        t.feed({"ev": "hello", "rank": r, "world_size": len(calls), "host": hosts_[r],
                "local_rank": (local or {}).get(r, r), "t": 0.0})
        t.feed({"ev": "enter", "rank": r, "id": 1, "t": 1.0, "op": "init_process_group", "func": "main",
                "group": list(range(len(calls))), "gname": "0", "world_size": len(calls), **call})
        if errors and r in errors:
            t.feed({"ev": "exit", "rank": r, "id": 1, "op": "init_process_group", "t": 2.0,
                    "error": errors[r]})
            t.feed({"ev": "end", "rank": r, "outcome": "error", "t": 2.0,
                    "error": {"type": errors[r].split(":")[0], "message": errors[r].split(": ", 1)[1],
                              "site": call.get("site")}})
    return out


def _env_init(addr: str, port: int = 29500, site: str = "train.py:7") -> dict:
    return {"site": site, "backend": "gloo", "init_method": "env://", "endpoint": f"{addr}:{port}",
            "MASTER_ADDR": addr, "MASTER_PORT": str(port)}


TWO_NODES = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}


def test_localhost_on_two_nodes_is_two_places_and_node1_is_named():
    tracks = _tracks({r: _env_init("localhost") for r in range(4)}, TWO_NODES)
    assert not progress_possible(tracks)  # the hang rule: node1's localhost is not node0's
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks, d.site) == ("init_mismatch", [2, 3], "train.py:7")
    assert d.cause.startswith("Ranks 2 and 3 (node1) rendezvous at localhost:29500 (env:// with"
                              " MASTER_ADDR=localhost, at train.py:7), which on node1 is node1's own loopback,"
                              " where no store listens: the store is on node0, the master node"), d.cause
    assert "keep the launcher's MASTER_ADDR" in d.cause
    assert d.details["endpoints"] == {"localhost:29500 on node0": [0, 1], "localhost:29500 on node1": [2, 3]}


def test_localhost_on_one_host_is_one_place():
    tracks = _tracks({r: _env_init("localhost") for r in range(4)}, {r: "box" for r in range(4)})
    assert progress_possible(tracks)  # every rank at the same endpoint: init can complete
    assert hosts.loopback_rendezvous(tracks) is None
    assert hosts.meeting_point(tracks[0], tracks[0].inits[-1], hosts.several(tracks)) == "localhost:29500"


def test_the_launcher_s_master_addr_on_two_nodes_is_one_place():
    tracks = _tracks({r: _env_init("node0") for r in range(4)}, TWO_NODES)
    assert progress_possible(tracks)
    assert hosts.loopback_rendezvous(tracks) is None and hosts.duplicate_rank(tracks) is None


def _write_job(tmp_path, rank_expr: str) -> str:
    path = tmp_path / "job.py"
    path.write_text("import os\nimport torch.distributed as dist\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
                    f"dist.init_process_group('gloo', rank={rank_expr},\n                        world_size=4)\n")
    return f"{path}:4"


STORE_TIMEOUT = "DistStoreError: wait timeout after 10000ms, keys: /default_pg/0//cpu//0/2"


def test_local_rank_passed_as_rank_is_read_from_the_call_and_named(tmp_path):
    site = _write_job(tmp_path, "local_rank")
    tracks = _tracks({r: _env_init("node0", site=site) for r in range(4)}, TWO_NODES,
                     local={0: 0, 1: 1, 2: 0, 3: 1}, errors={r: STORE_TIMEOUT for r in range(4)})
    d = diagnose_failure(tracks, {r: "error" for r in range(4)})
    assert (d.kind, d.culprit_ranks) == ("duplicate_rank", [2, 3]), d.cause
    assert d.cause.startswith(f"Ranks 2 and 3 (node1) passed rank=local_rank to init_process_group at {site}:"
                              " their LOCAL_RANK (0, 1), which numbers the processes within a node. Ranks 0 and 1"
                              " are then claimed twice, by processes on node0 and on node1, and no process joins as"
                              " ranks 2 and 3"), d.cause
    assert f"until the timeout ({STORE_TIMEOUT})" in d.cause and "Pass RANK" in d.cause
    assert d.details["claimed"] == {"0": 0, "1": 1, "2": 0, "3": 1} and d.details["unclaimed"] == [2, 3]
    # a hang the run's own timeout ended (the default init timeout is 30 minutes) is named the same way
    pending = _tracks({r: _env_init("node0", site=site) for r in range(4)}, TWO_NODES, local={0: 0, 1: 1, 2: 0, 3: 1})
    assert (diagnose_hang(pending).kind, diagnose_hang(pending).culprit_ranks) == ("duplicate_rank", [2, 3])


def test_rank_from_rank_is_not_a_duplicate(tmp_path):
    site = _write_job(tmp_path, "int(os.environ['RANK'])")
    tracks = _tracks({r: _env_init("node0", site=site) for r in range(4)}, TWO_NODES, local={0: 0, 1: 1, 2: 0, 3: 1},
                     errors={r: STORE_TIMEOUT for r in range(4)})
    assert hosts.duplicate_rank(tracks) is None
    assert diagnose_failure(tracks, {r: "error" for r in range(4)}).kind == "rank_error"


def test_a_recorded_rank_argument_is_read_before_the_source():
    tracks = _tracks({r: {**_env_init("node0"), "rank_arg": [0, 1, 0, 1][r]} for r in range(4)}, TWO_NODES,
                     local={0: 0, 1: 1, 2: 0, 3: 1})
    d = hosts.duplicate_rank(tracks)
    assert (d.kind, d.culprit_ranks) == ("duplicate_rank", [2, 3])
    assert "passed a rank to init_process_group" in d.cause  # no source was read: the words say only what is known


REFUSED = ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:152] timed"
           " out connecting: SO_ERROR: Connection refused, remote=[127.0.1.1]:21405$3")


def test_a_peer_refused_at_127_0_1_1_on_two_nodes_names_the_hosts_file_and_the_fix():
    tracks = _tracks({r: _env_init("node0") for r in range(4)}, TWO_NODES, errors={2: REFUSED, 3: REFUSED})
    d = diagnose_failure(tracks, {0: "stopped", 1: "stopped", 2: "error", 3: "error"})
    assert (d.kind, d.culprit_ranks) == ("loopback_address", [0, 1, 2, 3]), d.cause
    assert d.cause.startswith("Ranks 2 and 3 (node1) could not connect to their peers on another node: gloo on the"
                              " other node listens on 127.0.1.1, a loopback address"), d.cause
    assert "which from node1 is node1 itself" in d.cause and "/etc/hosts" in d.cause
    assert "Set GLOO_SOCKET_IFNAME on every node" in d.cause
    assert d.details["refused"] == {"2": "127.0.1.1:21405", "3": "127.0.1.1:21405"}


def test_a_loopback_refusal_on_one_host_is_not_named_so():
    tracks = _tracks({r: _env_init("127.0.0.1") for r in range(2)}, {0: "box", 1: "box"}, errors={1: REFUSED})
    assert hosts.loopback_address(tracks) is None
    assert diagnose_failure(tracks, {0: "stopped", 1: "error"}).kind == "rank_error"


# -------------------------------------------------------------------------------------- real runs on two nodes
@needs_nodes
@pytest.mark.parametrize("slug,words", [
    ("master-addr-localhost", ["which on node1 is node1's own loopback, where no store listens",
                               "the store is on node0, the master node", "keep the launcher's MASTER_ADDR"]),
    ("local-rank-as-rank", ["Ranks 2 and 3 (node1) passed rank=local_rank to init_process_group",
                            "their LOCAL_RANK (0, 1)", "no process joins as ranks 2 and 3", "Pass RANK"]),
    # which side of a pair dials is gloo's choice per pair: the ranks that raise vary, the words do not
    ("hostname-loopback", ["could not connect to", "peers on another node",
                           "listens on 127.0.1.1, a loopback address", "Set GLOO_SOCKET_IFNAME on every node"])])
def test_each_broken_variant_names_the_node_and_the_cause(slug, words, clean):
    res, ok, why = catalogue_run(slug, "broken")  # the run test_catalogue holds against the record, once per test run
    assert ok, f"{why}\n{res.diagnosis.summary}"
    assert [r.host for r in res.ranks] == ["node0", "node0", "node1", "node1"]
    s = res.diagnosis.summary
    assert "(node1)" in s or "(node0)" in s, s
    for w in words:
        assert w in s, f"{w!r} not in: {s}"


@needs_nodes
def test_ranks_that_cannot_be_spread_over_the_nodes_are_one_sentence_and_exit_2():
    p = subprocess.run([sys.executable, "-m", "sandbox.repro", "master-addr-localhost", "-n", "3"], capture_output=True,
                       text=True, timeout=T, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == "sandbox.repro: 3 ranks cannot be spread evenly over 2 nodes.", p.stderr


# ------------------------------------------------------------------------------------------------- docs and lab
def test_the_four_bugs_share_one_lab_in_its_order_on_the_site():
    pytest.importorskip("yaml", reason="needs the optional package yaml (pip install -e '.[docs]')")
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    import catalogue_pages  # docs/catalogue_pages.py

    assert {s: catalogue_pages.lab_of(s) for s in MULTI} == {s: "labs/27_multinode.ipynb" for s in MULTI}
    assert catalogue_pages.lab_of("init-port") == "labs/01_init_port.ipynb"  # a lab of one bug, by its name
    order = catalogue_pages.bug_order()
    assert [s for s in order if s in MULTI] == list(MULTI)  # the order the lab takes them in
