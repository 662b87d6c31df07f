"""What every contract rule shares: the rules in words, the warning a breach becomes, and how a call is said."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sandbox import branches
from sandbox.events import RankTrack
from sandbox.words import signature

RULES = {
    "collective_differs": "Every rank of a group must make the same collective at the same point, with the same "
                          "op, shapes, dtypes, root and reduce op: gloo may still pair unlike calls of one size, and "
                          "NCCL checks nothing, so the data is silently wrong.",
    "group_mismatch": "Every rank must call every new_group (unless use_local_synchronization=True), with the same "
                      "ranks, in the same order: groups are named by that order.",
    "p2p_unmatched": "Every send needs a matching recv on its peer (same tag); an unmatched one hangs on gloo and on "
                     "NCCL as soon as the timing changes.",
    "send_cycle": "With blocking send/recv, the matching recv must be reachable on the peer before a send: two ranks "
                  "that send to each other first deadlock on gloo at any size, and on NCCL once the messages outgrow "
                  "its buffers or the pair's connection is new. Post both sides first (isend and irecv, or "
                  "batch_isend_irecv), then wait: that holds for any number of ranks, where ordering the calls by "
                  "rank parity deadlocks again in a ring of an odd number of them.",
    "async_unwaited": "The Work of an isend, irecv or async_op=True call must be waited on before its tensor is "
                      "used, the group destroyed or the process left.",
    "call_count": "Every rank of a group must make the same number of collectives on it; a rank with extra calls "
                  "waits for partners that are gone.",
    "object_device": "A tensor inside an object (all_gather_object, gather_object, broadcast_object_list, "
                     "scatter_object_list) comes back on the device it was sent from: send it from the CPU, or "
                     "move it (.to(device)) before using it with this rank's tensors.",
    "group_member": "A rank calls a collective only on groups it is a member of: new_group returns every other rank "
                    "a placeholder (GroupMember.NON_GROUP_MEMBER), and a collective on it warns and moves no data.",
    "group_rank": "src and dst are global ranks, group_src and group_dst ranks within the group passed with them: "
                  "a global rank outside the group is an error, and a number that is a rank of both kinds names two "
                  "different processes.",
    "any_source": "A recv without src takes the first message from any rank: where several ranks send to it, name "
                  "the sender, or the message of one lands in the buffer meant for another.",
    "buffer_written": "The tensor of an isend (or a batch_isend_irecv send) is read when the transfer happens, not "
                      "when it is posted: do not write it before the request's wait() returns (send a fresh tensor, "
                      "or wait first).",
    "data_order": "A collective that combines tensors place by place (all_reduce, reduce, reduce_scatter, broadcast) "
                  "needs every rank to lay its tensor out in one order: a dict or list filled while walking the "
                  "rank's own share of the data holds its keys in the order that share met them.",
    "ddp_order": "DistributedDataParallel copies rank 0's parameters and buffers to every rank by position, not by "
                 "name (at construction, and the buffers again before every forward): every rank must register "
                 "them in the same order, or a rank gets another one's values under the same shape.",
    "not_destroyed": "Call dist.destroy_process_group() before the process exits (PyTorch warns about it from 2.4 "
                     "on; NCCL may hang or leak at exit without it).",
}


@dataclass
class ContractWarning:
    kind: str
    summary: str
    ranks: list[int]
    op: str | None = None
    group: list[int] | None = None
    seq: int | None = None
    sites: dict[int, str] = field(default_factory=dict)
    details: dict = field(default_factory=dict)  # the facts behind the sentence, per kind (not stable)
    culprits: list[int] | None = None  # the ranks whose call differs, where fewer than `ranks` (None: all of them)

    @property
    def rule(self) -> str:
        return RULES[self.kind]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sites"] = {str(r): s for r, s in self.sites.items()}
        d["rule"] = self.rule
        d["culprit_ranks"] = d.pop("culprits") or list(self.ranks)
        return d


def ended_ok(t: RankTrack | None) -> bool:
    """Did the rank's own code finish? (Not known of a rank that left no Flight Recorder dump.)"""
    return t is not None and t.end is not None and t.end.get("outcome") == "ok" and not t.end.get("no_dump")


def where(p: dict) -> str:
    return p.get("site") or "?"


def said(p: dict) -> str:
    """A call as a warning says it: its signature with its reduce op (`all_reduce(shape [1], float32, SUM)`)."""
    return signature(p, redop=True)


def branch_words(p: dict) -> str:
    """' (through `if rank == 0:` at x.py:5)' when the call's own site sits under a rank-dependent if."""
    b = branches.rank_branch(branches.site_frame(p.get("site")))
    return f" ({branches.through(b)})" if b else ""
