"""Rules for a run whose ranks are on several hosts (nodes): the mistakes a script that worked on one machine makes
on the second one. Each rule reads the host every rank said hello from (`hello["host"]`), so it works the same on
the sandbox's simulated nodes, offline on the traces of a real cluster, and never fires on one host.

- `meeting_point`: a rendezvous at a loopback name (`localhost`, 127.x.y.z, ::1) is another place on every node.
  The hang rule (`progress.can_complete`) compares init calls by it, so ranks of two nodes that both dial
  "localhost:29500" are seen never to meet; `loopback_rendezvous` names it (an `init_mismatch`).
- `duplicate_rank`: processes that claimed one rank twice in `init_process_group`, and so left other ranks unclaimed
  (LOCAL_RANK passed where RANK was meant). Read from the rank each call passed when the trace records it, else
  from the `rank=` argument at the call's line.
- `loopback_address`: gloo on one node advertised a loopback address (its hostname resolves to 127.0.1.1, as the
  hosts file of a Debian or Ubuntu install says), so ranks of the other nodes are refused.

Torch-free. The words "rank 2 (node1)" are written here where a rank and its node go together; the launcher adds
the node only after a lone "rank N" that has none (`sandbox._run.assemble.on_nodes`).
"""
from __future__ import annotations

import ast
import re

from sandbox import branches, words
from sandbox.result import Diagnosis, Kind

LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|::1|::ffff:127(\.\d{1,3}){3})$", re.I)
# gloo's connect that the peer's host refused, at an address that is a loopback one: "... SO_ERROR: Connection
# refused, remote=[127.0.1.1]:21405"
REFUSED_AT_LOOPBACK = re.compile(r"Connection refused, remote=\[?(127(?:\.\d{1,3}){3}|::1)\]?:(\d+)")
# the store key gloo waits on for a rank's address: ".../default_pg/0//cpu//0/2" is rank 2's
RANK_KEY = re.compile(r"wait timeout after \d+ ?ms, keys: \S*/(\d+)\b")
ENV_IFNAME = "GLOO_SOCKET_IFNAME"


def hosts(tracks) -> dict[int, str]:
    """Each rank's host, as it said hello (ranks that never did are absent)."""
    return {r: t.hello["host"] for r, t in tracks.items() if t.hello and t.hello.get("host")}


def several(tracks) -> bool:
    """Are the ranks on more than one host?"""
    return len(set(hosts(tracks).values())) > 1


def at(rs, where: dict[int, str]) -> str:
    """'ranks 2-3 (node1)', 'rank 0 (node0) and ranks 4-5 (node2)': ranks grouped by their host, in rank order."""
    by: dict[str, list[int]] = {}
    for r in sorted(rs):
        by.setdefault(where.get(r, "?"), []).append(r)
    return words.listed([f"{words.ranks(g)} ({h})" for h, g in by.items()])


def _host_of(endpoint: str | None) -> str:
    return (endpoint or "").rpartition(":")[0].strip("[]")


def meeting_point(t, p: dict, spread: bool) -> str | None:
    """Where an init call meets: its endpoint, and on several hosts, for a loopback endpoint, whose loopback it is
    ("localhost:29500 on node1"): the same words name another machine on every node."""
    ep = p.get("endpoint")
    host = (t.hello or {}).get("host")
    if spread and host and LOOPBACK.match(_host_of(ep)):
        return f"{ep} on {host}"
    return ep


def loopback_rendezvous(tracks) -> Diagnosis | None:
    """Ranks on several hosts that rendezvous at a loopback endpoint: those away from rank 0's node (where the
    store of `env://` or `tcp://` is hosted: torchrun's agent store on the master node, or rank 0 itself) dial
    their own machine, where no store listens."""
    where = hosts(tracks)
    if len(set(where.values())) < 2 or 0 not in where:
        return None
    last = {r: t.inits[-1] for r, t in tracks.items() if t.inits}
    looped = sorted(r for r, p in last.items() if LOOPBACK.match(_host_of(p.get("endpoint"))))
    home = where[0]
    culprits = [r for r in looped if where.get(r) not in (None, home)]
    if not culprits:
        return None
    p = last[culprits[0]]
    ep, how = p.get("endpoint"), p.get("init_method") or "env://"
    if how.startswith("env://"):
        how = f"env:// with MASTER_ADDR={p.get('MASTER_ADDR')}"
    others = sorted(r for r in last if r not in culprits)
    nodes = sorted({where[r] for r in culprits})
    own = (f"{nodes[0]}'s own loopback" if len(nodes) == 1 else "each node's own loopback")
    cause = (f"{_cap(at(culprits, where))} rendezvous at {ep} ({how}, at {p.get('site')}), which on"
             f" {words.listed(nodes)} is {own}, where no store listens: the store is on {home}, the master node, so"
             f" they can never meet {at(others, where) if others else 'the others'}. `localhost` names a different"
             f" machine on every node: keep the launcher's MASTER_ADDR (env:// reads MASTER_ADDR and MASTER_PORT),"
             f" which names {home} on every node.")
    return Diagnosis(kind=Kind.INIT_MISMATCH, cause=cause, culprit_ranks=culprits, op="init_process_group", seq=0,
                     site=p.get("site"),
                     details={"endpoints": _camps(tracks, last), "store_node": home})


def _camps(tracks, last) -> dict[str, list[int]]:
    camps: dict[str, list[int]] = {}
    for r, p in sorted(last.items()):
        camps.setdefault(str(meeting_point(tracks[r], p, True)), []).append(r)
    return camps


def rank_argument(site: str | None) -> str | None:
    """The source of the `rank=` argument of the call at this site ("local_rank", "int(os.environ['LOCAL_RANK'])"),
    or None: no such call there, or the file cannot be read."""
    frames = branches.site_frame(site)
    parsed = branches.parsed_source(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, src = parsed
    line = frames[0][1]
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            kw = next((k for k in node.keywords if k.arg == "rank"), None)
            if kw is not None and (found is None or node.lineno >= found[0]):  # the innermost call wins
                found = (node.lineno, " ".join((ast.get_source_segment(src, kw.value) or "").split()))
    return found[1] if found else None


def claimed_ranks(tracks) -> tuple[dict[int, int], str | None]:
    """({process's rank: the rank it claimed in its last init_process_group}, the `rank=` text that says so), for
    processes whose claim is known: the call's recorded `rank_arg` (the `rank=` it was passed), else a `rank=`
    argument whose source reads LOCAL_RANK (the process's local rank, from its hello)."""
    claimed, said = {}, None
    for r, t in tracks.items():
        if not t.inits:
            continue
        p = t.inits[-1]
        if isinstance(p.get("rank_arg"), int) and p["rank_arg"] >= 0:  # the `rank=` passed, where the trace has it
            claimed[r] = p["rank_arg"]
            continue
        arg = rank_argument(p.get("site"))
        local = (t.hello or {}).get("local_rank")
        if arg and re.search(r"local_rank", arg, re.I) and isinstance(local, int):
            claimed[r], said = local, arg
    return claimed, said


def duplicate_rank(tracks) -> Diagnosis | None:
    """Processes that claimed another process's rank in init_process_group: the claimed ranks are taken twice and
    the ranks nobody claimed never join, so every process waits for their addresses until the timeout."""
    claimed, said = claimed_ranks(tracks)
    wrong = sorted(r for r, c in claimed.items() if c != r)
    if not wrong or len(set(claimed.values())) == len(claimed):
        return None  # every claim is distinct: whatever is wrong, no rank is taken twice
    where = hosts(tracks)
    ws = max([len(tracks)] + [p.get("world_size") or 0 for t in tracks.values() for p in t.inits[-1:]])
    taken = sorted({claimed[r] for r in wrong})
    unclaimed = sorted(set(range(ws)) - set(claimed.values()))
    p = tracks[wrong[0]].inits[-1]
    arg = f"rank={said}" if said else "a rank"
    local = said or all((tracks[r].hello or {}).get("local_rank") == claimed[r] for r in wrong)
    what = (f"{'its' if len(wrong) == 1 else 'their'} LOCAL_RANK ({', '.join(str(claimed[r]) for r in wrong)}),"
            " which numbers the processes within a node" if local
            else f"{', '.join(str(claimed[r]) for r in wrong)}")
    twice = [r for r in sorted(claimed) if claimed[r] in taken and r not in wrong]
    by = words.listed([f"on {h}" for h in dict.fromkeys(where.get(r, "?") for r in twice + wrong)])
    # gloo's own words once the timeout passed, where it did: the key of the first address nobody published
    timed_out = next((t.error for t in tracks.values() if RANK_KEY.search((t.error or {}).get("message", ""))), None)
    until = (f" until the timeout ({timed_out.get('type', 'error')}: {words.short(timed_out['message'])})"
             if timed_out else "")
    joins = words.ranks(unclaimed) if unclaimed else "the others"
    cause = (f"{_cap(at(wrong, where))} passed {arg} to init_process_group at {p.get('site')}: {what}."
             f" {_cap(words.ranks(taken))} {'is' if len(taken) == 1 else 'are'} then claimed twice, by processes"
             f" {by}, and no process joins as {joins}, so every process waits in init_process_group for"
             f" {'its address' if len(unclaimed) == 1 else 'their addresses'}{until}. Pass RANK, the rank in the"
             f" whole job (or leave rank= out: env:// reads RANK); LOCAL_RANK is for what is per node, such as the"
             f" GPU to use.")
    return Diagnosis(kind=Kind.DUPLICATE_RANK, cause=cause, culprit_ranks=wrong, op="init_process_group", seq=0,
                     site=p.get("site"), details={"claimed": {str(r): c for r, c in sorted(claimed.items())},
                                                  "unclaimed": unclaimed})


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def loopback_address(tracks) -> Diagnosis | None:
    """On several hosts, ranks whose gloo connection to a peer was refused at a loopback address: the peer, on
    another node, advertised the address its hostname resolves to, and that is a loopback one there."""
    where = hosts(tracks)
    if len(set(where.values())) < 2:
        return None
    refused = {}
    for r, t in tracks.items():
        m = REFUSED_AT_LOOPBACK.search((t.error or {}).get("message", "") or t.failed_with or "")
        if m:
            refused[r] = m
    if not refused:
        return None
    first = refused[min(refused)]
    addr = first.group(1)
    nodes = sorted({where.get(r, "?") for r in refused})
    p = next((t.inits[-1] for r, t in sorted(tracks.items()) if r in refused and t.inits), {})
    why = (f"here the node's hosts file maps its own name to {addr} (the `127.0.1.1 <hostname>` line the Debian and"
           " Ubuntu installers write into /etc/hosts)" if addr == "127.0.1.1" else
           f"here that is {addr}: the hostname resolves to a loopback address, or {ENV_IFNAME} names the loopback")
    cause = (f"{_cap(at(refused, where))} could not connect to {'its' if len(refused) == 1 else 'their'} peers on"
             f" another node: gloo on the other node listens on {addr}, a loopback address, and told its peers to"
             f" connect there (Connection refused, remote=[{addr}]:{first.group(2)}), which from"
             f" {f'{nodes[0]} is {nodes[0]}' if len(nodes) == 1 else f'each of {words.listed(nodes)} is that node'}"
             f" itself. Without {ENV_IFNAME}, gloo binds the address its node's hostname resolves to, and {why}, so"
             f" no rank can reach a rank of another node."
             f" Set {ENV_IFNAME} on every node to the interface that carries the node's address"
             f" (`{ENV_IFNAME}=eth0`, as PyTorch's docs advise), or map each hostname to that address in"
             f" /etc/hosts.")
    return Diagnosis(kind=Kind.LOOPBACK_ADDRESS, cause=cause, culprit_ranks=sorted(tracks), op="init_process_group",
                     seq=0, site=p.get("site"),
                     details={"address": addr, "refused": {str(r): f"{m.group(1)}:{m.group(2)}"
                                                           for r, m in sorted(refused.items())},
                              "nodes": {str(r): h for r, h in sorted(where.items())}})
