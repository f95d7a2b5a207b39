"""What the grader shows: reports of a grade (render: the ``--json`` file and
writing them all; table: the terminal table and Markdown; platforms: Gradescope
and JUnit) and progress while it runs (progress)."""
