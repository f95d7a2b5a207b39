"""What runs inside the sandbox: the worker script (``main``, copied into each
working copy as ``_grader_worker.py``) and its torch.optim seal (``seal``, as
``_grader_seal.py``). Nothing here imports ``grader`` (the working copy holds
none of it); the trusted side imports these modules' constants and
``WorkerConfig`` from here, and drives workers from :mod:`grader.sandbox`.
"""
