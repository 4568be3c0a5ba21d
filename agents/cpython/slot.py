"""What the CPython agent keeps per OS thread between its stops: the thread state it maps to, the read plan
of its next capture and the snapshot that plan is copied into (``scatter.py``), the check of the code objects
its last snapshot met (``code_check.py``), and what its next stop must do beyond the plan: copy new code
objects (``code_prefetch.py``) or walk in full.
"""

from __future__ import annotations

from agents.cpython.capture import Wanted
from agents.cpython.code_check import HeaderCheck
from agents.cpython.code_prefetch import CodePrefetch
from agents.cpython.plan import SHRINK_AFTER, ReadPlan, build_plan, next_ranges, served_ranges
from agents.cpython.scatter import Readv, Snapshot
from agents.cpython.threads import ThreadStateInfo
from profiler.target.ptrace import raw_process_vm_readv


class ThreadSlot:
    """Per OS thread: its thread state, the read plan of its next capture, and what the last capture asked
    the next plan to cover (``pending``: rebuilt after resume, ``plan.next_ranges`` says how)."""

    __slots__ = ("key", "ident", "info", "used", "pending", "snap", "clean", "tid", "check", "_ahead", "walk_next")

    def __init__(
        self, key: int, info: ThreadStateInfo, ident: int | None = None, readv: Readv = raw_process_vm_readv
    ) -> None:
        self.key = key  #: what the session maps this thread by: its tid (3.11+) or its fs_base
        #: what the thread state's own id field holds while it is this thread's (a capture checks it): the key,
        #: but for a state made in the process this one was forked from (``ThreadBindings.adopt``)
        self.ident = key if ident is None else ident
        self.info = info
        self.snap = Snapshot(readv)  #: the plan's bytes as the last stop of a ``CPythonSession.snapshot`` copied them
        self.used: Wanted = ([], [])  #: what the plan was built from: fixed reads, then cframes and frames
        #: what the last capture read, whether it missed reads, and the planned range it could not read
        self.pending: tuple[Wanted, bool, tuple[int, int] | None] | None = None
        self.clean = 0  #: captures this plan has served without a miss since it was built
        #: the OS thread captured by this slot since the last walk of the thread lists (0: none yet). On
        #: <=3.10 the key is the pthread handle, which glibc gives a new thread when it hands it an exited
        #: thread's cached stack: a capture for another tid finds the slot stale (``CPythonSession``)
        self.tid = 0
        #: the code objects its last settled snapshot met, and how to check them (``code_check.py``)
        self.check: HeaderCheck | None = None
        self._ahead: CodePrefetch | None = None
        #: its last snapshot fell short of the chain: its next stop walks it (``CPythonSession.capture``)
        self.walk_next = False

    @property
    def plan(self) -> ReadPlan:
        """The read plan of the thread's next capture: its snapshot's, which is fit for it when it is set."""
        return self.snap.plan

    @plan.setter
    def plan(self, plan: ReadPlan) -> None:
        self.snap.fit(plan)

    @property
    def ahead(self) -> CodePrefetch | None:
        """What the thread's next stops copy besides the plan: new code objects its snapshots met, not
        decoded yet (``code_prefetch.py``), copied in the plan's ``process_vm_readv`` where they fit."""
        return self._ahead

    @ahead.setter
    def ahead(self, ahead: CodePrefetch | None) -> None:
        if ahead is not self._ahead:
            self._ahead = ahead
            self.snap.attach(ahead.snap if ahead is not None else None)

    @property
    def co_read(self) -> Snapshot:
        """What the tracer copies with the stack window in a stop whose agent data this slot is (runtime.py)."""
        return self.snap

    def note(self, wanted: Wanted | None, missed: bool, unread: tuple[int, int] | None) -> None:
        """During the stop, or after a snapshot's walk: what the capture read, if its plan should change (the
        plan is rebuilt after resume). A plan that missed reads is rebuilt at once. One that read everything
        but holds more than twice what the capture needed (``ChainCopier.copy`` asks) is cut back, once it
        has served SHRINK_AFTER captures without a miss since it was built, to this capture's reads and
        the ranges any walk used meanwhile (``plan.served_ranges``)."""
        if not missed:
            self.clean += 1
            if self.clean < SHRINK_AFTER:
                return
        if wanted is not None:  # None: nothing to plan from (a stale thread state, a plan that fits)
            self.pending = (wanted, missed, unread)

    def rebuild(self) -> None:
        """After resume: the plan for what the last capture asked (nothing to do if it asked nothing)."""
        if self.pending is None:
            return
        (fixed, rest), missed, unread = self.pending
        if missed:
            rest = next_ranges(self.used[1], rest, unread)
        else:
            rest = served_ranges(self.plan, self.used[1], rest)
        self.used = (fixed, rest)
        self.plan = build_plan(fixed, rest)
        self.pending = None
        self.clean = 0
