"""Reference solutions (instructors only: never shipped in the student release)."""
