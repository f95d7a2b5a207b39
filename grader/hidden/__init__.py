"""Hidden differential checks (instructors only; never shipped to students)."""
