"""What the similarity report (grader/instructor/similarity/) discounts, each
on code written here: code two independent correct solutions share (expected),
code more students hold than MAX_HOLDERS (common), short shared code, the
stubs and the import lines."""

from __future__ import annotations

from grader.instructor import similarity
from grader.util import REPO

#: A function two students share verbatim in the tests below (long enough to count: 259 tokens).
SHARED = '''
def checked_window(values, start, length, *, step=1, fill=None):
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"values must be a list or a tuple, got {type(values).__name__}")
    if step <= 0 or length < 0:
        raise ValueError(f"step must be positive and length non-negative, got {step} and {length}")
    picked = []
    position = start
    while len(picked) < length:
        if 0 <= position < len(values):
            picked.append(values[position])
        elif fill is not None:
            picked.append(fill)
        else:
            raise IndexError(f"position {position} is outside 0..{len(values) - 1} and no fill was given")
        position += step
    return tuple(picked)
'''

#: Code of each student's own, written differently (so that it shares nothing with the others').
OWN = ['''
def total(xs):
    return sum(x * x for x in xs if x > 0)
''', '''
class Counter:
    def __init__(self):
        self.seen = {}

    def add(self, key):
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.seen[key]
''']


def _sources(*texts: str) -> list[similarity.Source]:
    return [similarity.Source(f"s{i}", files=similarity.module_units({"__init__": "", "views": text}))
            for i, text in enumerate(texts)]


def _solutions(*lines: str) -> list[similarity.Solution]:
    """A correct solution per line given, each holding SHARED in views (and code of its own)."""
    return [similarity.Solution(f"sol{i}", line, similarity.module_units({"views": SHARED + OWN[i % 2]}))
            for i, line in enumerate(lines)]


def _compare(sources: list[similarity.Source], solutions: list[similarity.Solution] = (),
             **settings: int) -> list[similarity.Pair]:
    stubs = similarity.stubs_of()
    return similarity.compare(sources, stubs, similarity.fingerprint_corpus(solutions, stubs),
                              similarity.Settings(**settings))


def test_code_two_independent_correct_solutions_share_is_expected():
    """SHARED in two solutions of different lines is expected code: two students
    holding it are not flagged for it. In two solutions of one line (an edited
    copy of the other) it is not: they are flagged."""
    students = _sources(SHARED + OWN[0], SHARED + OWN[1])
    (apart,) = _compare(students, _solutions("line-a", "line-b"))
    assert not apart.flagged and apart.rare_tokens == 0 and apart.score == 0.0
    assert apart.expected_tokens >= 250 and apart.raw_similarity > 0.5
    (copied,) = _compare(students, _solutions("line-a", "line-a"))
    assert copied.flagged and copied.rare_tokens >= 250 and copied.expected_tokens == 0
    (alone,) = _compare(students)  # no corpus: nothing is expected
    assert alone.flagged and alone.score == copied.score


def test_code_more_than_max_holders_hold_is_common():
    """Three students holding SHARED: each pair is flagged. Twelve (more than
    MAX_HOLDERS): it is common code, counted in no pair."""
    few = _compare(_sources(*[SHARED] * 3))
    assert len(few) == 3 and all(p.flagged for p in few)
    many = _compare(_sources(*[SHARED] * (similarity.MAX_HOLDERS + 2)))
    assert many and not any(p.flagged or p.rare_tokens for p in many)
    assert all(p.common_tokens >= 250 for p in many)
    # The limit is a setting (MOSS's -m): raised above the class, the twelve are flagged again.
    assert all(p.flagged for p in _compare(_sources(*[SHARED] * 12), max_holders=12))


def test_a_short_shared_function_is_not_a_case():
    """A whole module of a few lines in common scores 100% but is not flagged:
    its rare code is fewer than MIN_TOKENS tokens."""
    short = SHARED.split("    picked = []")[0]  # the signature and its two checks
    (pair,) = _compare(_sources(short, short))
    assert pair.score == 1.0 and 0 < pair.rare_tokens < similarity.MIN_TOKENS and not pair.flagged
    (pair,) = _compare(_sources(short, short), min_tokens=pair.rare_tokens)
    assert pair.flagged


def test_untouched_stubs_and_imports_share_nothing():
    """Two students who left views as the stub, or who share only their import
    lines, have no pair (a k-gram across the stub and __init__ used to pair them)."""
    stub = (REPO / "student" / "views.py").read_text()
    init = (REPO / "student" / "__init__.py").read_text()
    stubs_only = [similarity.Source(n, files=similarity.module_units({"__init__": init, "views": stub}))
                  for n in ("a", "b")]
    assert _compare(stubs_only) == []
    imports = "import math\nimport os\nfrom collections.abc import (\n    Iterable,\n    Sequence,\n)\n" \
              "from torch import nn, \\\n    optim\n"
    assert _compare(_sources(imports + OWN[0], imports + OWN[1])) == []
    blanked = similarity.without_imports(imports + OWN[0])
    assert len(blanked) == len(imports + OWN[0]) and blanked.strip() == OWN[0].strip()
