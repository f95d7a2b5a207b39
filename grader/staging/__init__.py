"""Staging a submission: from what a student uploaded to the files a worker sees.

``submission`` finds the upload's ``student/`` (a folder or a zip archive,
unpacked defensively); ``workcopy`` makes the working copy a worker imports
(the submission's plain modules, the public harness and the worker script),
refusing a ``student/`` whose imports could differ from the sources the
trusted side reads. Both import nothing of the grader but :mod:`grader.util`,
so :mod:`grader.sandbox`, the engine and the instructors' tools all build on
them.
"""
