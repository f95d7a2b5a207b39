"""The trusted side of running a submission: how a worker is isolated
(``isolation``, ``uidsandbox``), limited (``limits``, ``cgroups``; the budget policy is
:mod:`grader.budgets`),
given its files (``workcopy``, ``submission``, ``scratch``, ``optimseal``),
observed from outside (``meter``, ``proctree``), talked to (``client``: one
worker's pipes and limits) and managed per problem (``remote``: ``RemoteImpl``).
The code that runs inside the sandbox is :mod:`grader.worker`.
"""
