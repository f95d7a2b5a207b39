"""What the grader shows: reports of a grade (render) and progress while it runs (progress)."""
