"""The project's own checks (instructors only; not shipped to students)."""
