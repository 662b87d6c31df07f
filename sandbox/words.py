"""How the sandbox says things: calls, ranks, call sites, exits and errors, in the few words a diagnosis needs.
Pure functions over events and tracks; the rules (`sandbox.diagnose`) decide what to say, this module how."""
from __future__ import annotations

import re
import signal

from sandbox import _paths
from sandbox._paths import shown_path  # noqa: F401  (how a file is shown is decided there, for the tracer too)
from sandbox.calls import is_collective, op_of, p2p_direction
from sandbox.events import RankTrack

# an error that only says a peer went away: a consequence, not a cause
PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|failed to recv|EOF|peer.*(closed|died)|"
                       r"Socket Timeout|unbound_buffer|Timed out waiting|ProcessGroupGloo.*timeout", re.I)


def peer_lost(message: str | None) -> bool:
    """Does this error message only say that a peer went away?"""
    return bool(PEER_LOST.search(message or ""))


def ranks(rs) -> str:
    """'rank 2', 'ranks 0 and 3', 'ranks 0-3', 'ranks 0, 2 and 5'."""
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + " and " + str(rs[-1])


def listed(items) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def plural(n: int, noun: str) -> str:
    """'1 line', '2 lines'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def a(noun: str) -> str:
    """'an all_reduce', 'a broadcast'."""
    return f"{'an' if noun[:1].lower() in tuple('aeiou') else 'a'} {noun}"


def call(p: dict) -> str:
    """A pending call in words: 'all_reduce #3 of group [0, 1] shape [4] float32', 'send to rank 1'."""
    coll = is_collective(p)
    bits = [p["op"] if p["op"] != "wait" else f"wait on {p.get('of')}"]
    if p.get("seq") and coll:
        bits.append(f"#{p['seq']}")
    if p.get("group") and coll:
        bits.append(f"of group {p['group']}")
    direction = p2p_direction(p)
    if p.get("peer") is not None and direction:
        bits.append(("to" if direction == "send" else "from") + f" rank {p['peer']}")
    if p.get("shapes") and coll:
        bits.append(f"shape {p['shapes'][0] if len(p['shapes']) == 1 else p['shapes']}")
    if p.get("dtypes") and coll:
        bits.append(p["dtypes"][0])
    return " ".join(bits)


def signature(p: dict, redop: bool = False) -> str:
    """op(shape, dtype, root) without the group and sequence number: for comparing ranks at one call; with
    `redop`, the reduce op too (`all_reduce(shape [1], float32, SUM)`)."""
    bits = []
    if p.get("shapes"):
        bits.append("shape " + str(p["shapes"][0] if len(p["shapes"]) == 1 else p["shapes"]))
    if p.get("length") is not None:  # broadcast_object_list: how many objects
        bits.append(f"{p['length']} object{'s' if p['length'] != 1 else ''}")
    if p.get("dtypes"):
        dts = p["dtypes"]
        bits.append(dts[0] if len(set(dts)) == 1 else f"dtypes {dts}")
    if p.get("root") is not None:
        bits.append(f"root {p['root']}")
    if p.get("splits"):
        bits.append(f"sends {p['splits'][0]}, receives {p['splits'][1]}")
    if redop and p.get("redop"):
        bits.append(p["redop"])
    return f"{op_of(p)}({', '.join(bits)})"


def groups_differ(k: int, camps: str) -> str:
    """The sentence for ranks that created process groups differently at their k-th new_group call (1-based);
    `camps` says what each camp of ranks created."""
    return f"The ranks created process groups differently at their new_group call #{k}: {camps}."


def first_line(msg: str) -> str:
    lines = [line for line in msg.strip().splitlines() if line.strip()]
    s = lines[0] if lines else ""
    return s if len(s) <= 300 else s[:297] + "..."


def short(msg: str) -> str:
    """An error's first line, without gloo's source path prefix and boilerplate."""
    line = first_line(msg)
    line = re.sub(r"^\[[^\]]*(third_party|/gloo/)[^\]]*\]\s*", "", line)
    line = re.sub(r"\s*This is typically caused by.*$", "", line)
    return line.rstrip(". ")


_FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (\S+)')


def stack_top(stack: str | None) -> str | None:
    """file:line (in function) of the innermost frame of a faulthandler dump that is the user's code: not torch,
    not the sandbox's plumbing (the same rule the tracer uses for call sites)."""
    if not stack:
        return None
    for line in stack.splitlines():  # faulthandler prints the most recent call first, the current thread first
        m = _FRAME.match(line)
        path = m.group(1) if m else ""
        if m and not (_paths.is_plumbing(path) or _paths.is_stdlib(path) or path.startswith("<")):
            return f"{shown_path(path)}:{m.group(2)} (in {m.group(3)})"
    return None


def signal_name(code: int | None) -> str | None:
    """'SIGKILL' for an exit status of -9; None for a normal exit."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:  # a signal number Python has no name for
        return None


def exit_words(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        name = signal_name(code)
        return f"killed by {name}" if name else f"killed by signal {-code}"
    return f"exit code {code}"


def where(t: RankTrack) -> str:
    """A few words on where a rank is now."""
    if t.pending is not None:
        return f"in {call(t.pending)} at {t.pending.get('site')}"
    if t.end is not None and t.end.get("no_dump") == "unreadable":
        return "without a readable Flight Recorder dump"
    if t.end is not None and t.end.get("no_dump"):
        return "without a Flight Recorder dump (it finished, or died before writing one)"
    if t.end is not None and t.end.get("dump_done"):
        last = next((ev for ev in reversed(t.events) if ev.get("ev") == "enter"), None)
        return ("at the end of the recorded calls" + (f" (the last: {call(last)}, completed)" if last else ""))
    if (t.exit_code is not None or t.end is not None) and not t.ended_by_sandbox:
        if t.error is not None:
            return f"already failed ({t.error['type']} at {t.error.get('site')})"
        code = t.exit_code if t.exit_code is not None else (t.end or {}).get("exit_code")
        if code == 0:
            return "already finished (exit 0)"
        return f"already gone ({exit_words(code)})"
    if t.hello is None and not t.events:
        return "not started yet"
    top = stack_top(t.stack)
    return f"busy in its own code at {top}" if top else "busy in its own code"
