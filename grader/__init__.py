"""The grader (instructor side): trusted verdicts over a sandboxed worker."""
