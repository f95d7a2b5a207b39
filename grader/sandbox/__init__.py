"""The trusted side of running a submission: how a worker is isolated
(``isolation``, ``uidsandbox``), limited (``limits``, ``cgroups``), given its
files (``scratch``, ``optimseal``), observed from outside (``meter``,
``proctree``), talked to (``forkserver``, ``workerproc``: one worker's pipes
and limits; ``errors``: what a call raises instead of a value) and managed per
problem (``remote``: ``RemoteImpl``; ``requests``: what one of its calls does;
``problemstate``: what it records). The code that runs inside the sandbox is
:mod:`grader.worker`; the working copy it runs in is :mod:`grader.staging`'s,
the budget policy :mod:`grader.budgets`'s.
"""
