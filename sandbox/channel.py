"""The zygote's pipe, from the parent's side: one JSON object a line.

The zygote (`sandbox._zygote`) says, in order:
    {"ready": true, "pid": P, "torch": "2.13.0"}     torch imported, the target prepared, ranks about to fork
    {"rank": R, "pid": P}                           rank R was forked as process P
    {"exit": R, "code": C}                          rank R ended (C < 0: killed by signal -C)
    {"done": true}                                  every rank has been reaped
or, instead of forking, {"fatal": "...", "traceback": "...", "usage": true?} when the run cannot start.
Lines that are not JSON are skipped (nothing else should write there: the zygote moves the pipe off fd 1).
"""
from __future__ import annotations

import json
import os
import select


class Channel:
    """Reads the zygote's messages without blocking; `poll(wait)` returns the ones that arrived."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.buf = b""
        self.eof = False  # the zygote closed the pipe: it exited (or was killed)

    def poll(self, wait: float) -> list[dict]:
        if self.eof:
            return []
        try:
            readable, _, _ = select.select([self.fd], [], [], wait)
        except InterruptedError:  # a signal arrived (Python retries select, but a handler may raise first)
            return []
        if not readable:
            return []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(msg, dict):
                out.append(msg)
        return out
