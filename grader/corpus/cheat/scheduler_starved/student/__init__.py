"""A hostile submission (grader corpus)."""
