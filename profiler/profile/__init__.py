"""The profile: what a recording holds, and the ``.nprof`` file that keeps it.

The sampler writes it; ``tree``, ``symbolize`` and ``export`` read it; this room imports none of them
(DESIGN.md section 3). Interned frames and stacks (``tables.py``), samples counted per (thread, stack, stop
reason, class), metadata and counters, save and load (``session.py``), and the frame-bounded memo both
the session and the sampler keep stacks in (``memo.py``).
"""
