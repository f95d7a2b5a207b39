"""Instructor workflows around the grader; none of it is shipped to students.

``python -m grader WORKFLOW ...`` dispatches here (see ``grader/__main__.py``):

* ``batch``: grade a whole class (:mod:`grader.instructor.batch`, the command;
  its parts: :mod:`.discovery`, :mod:`.gradescope_export`, :mod:`.precheck`,
  :mod:`.grading` run under :mod:`.supervisor`, :mod:`.records`,
  :mod:`.gradebook`, :mod:`grader.report.progress`, :mod:`.slurm`, :mod:`.files`);
* ``release``: the student repository (:mod:`.release`);
* ``gradescope``: the Gradescope autograder bundle (:mod:`.gradescope`);
* ``similarity``: the class similarity report (:mod:`.similarity`);
* ``mutants``: mutation testing of the public tests (:mod:`.mutants`);
* ``calibrate``: the reference's cost, for the budgets (:mod:`.calibrate`);
* ``check``: every place a change to the assignment still needs (:mod:`.check`).

Their templates (Slurm, Gradescope, the release's README and CI) live in
``templates/``. The release leaves this whole package out, and nothing in the
grading pipeline (``grader/*.py``) imports it, so ``python -m grader`` keeps
working in the student release.
"""
