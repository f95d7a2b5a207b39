"""Where the submission's code runs: the worker's isolation, limits, scratch folder and working copy."""
