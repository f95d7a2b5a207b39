"""``python -m grader.instructor.similarity``: the same as ``python -m grader similarity``."""

import sys

from grader.instructor.similarity import main

sys.exit(main())
