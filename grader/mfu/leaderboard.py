"""A graded MFU as a leaderboard entry: what the MFU check records, and whether it ranks.

The hidden MFU check records :func:`figures` of its report (trusted-side
numbers only: the trusted clock's times, the trusted verification) as its
check's figures; :func:`entry` reads them back from a problem's checks and
decides:

* **verified**: every timed run did the reference's work (``verify_run``), no
  submission process was seen where none may be, and no run beat the dense
  peak. An unverified run never enters a leaderboard: it has an entry (for the
  instructors' counts) but no value anywhere a board shows one.
* **doubts**: a verified run whose timing the grader does not vouch for is
  *marked*, not ranked (:data:`MAX_SPREAD`, :data:`MAX_SPEEDUP`, the measured
  matmul rate). It is marked rather than re-measured: a re-measure is more
  timed pairs inside the check, each to verify and calibrate again, for every
  doubtful submission; a marked row is what staff re-run by hand (as CS336's
  staff re-run the top of its self-reported boards).
* **board**: "GPU", or "CPU stand-in" for a rehearsal (``--cpu-stand-in``),
  whose figures are never shown beside a GPU's. That fact is the problem's
  (:attr:`grader.results.ProblemResult.stand_in`, which the caller passes),
  not one of the check's figures.

Doubts are categorical (the rule broken, with its threshold, never the
measured spread), so that what a student reads of a hidden check's timing is
its MFU alone, which is the point of a leaderboard. That MFU is a timing of
the student's own ``train`` on the rubric's workload (shipped) and fresh
random seeds: the MFU check has no hidden input a time could carry out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (reports need torch; reading entries back must not)
    from grader.mfu.report import MfuReport

__all__ = ["BOARDS", "GPU", "MAX_SPEEDUP", "MAX_SPREAD", "STAND_IN", "Entry", "entry", "figures",
           "gradescope_entries"]

GPU, STAND_IN = "GPU", "CPU stand-in"
BOARDS = (GPU, STAND_IN)
#: The slowest timed run of the submission (or of the reference) more than
#: this many times its fastest: the machine was too unsteady for the best
#: runs, which are what score, to be trusted to a rank. (The CPU stand-in's
#: repeats, timed in CPU seconds, differed by 1.19 and 1.24 times on a shared
#: 2-core machine; interference slows a run and never speeds it up.)
MAX_SPREAD = 1.5
#: More than this many times the reference's MFU: on a workload where large
#: matmuls dominate the reference's loop, a loop twice as fast is more likely
#: a broken measurement than a better loop; staff reproduce it first.
MAX_SPEEDUP = 2.0


def figures(report: MfuReport) -> dict[str, float]:
    """What the MFU check records for its report (numbers only: a check's
    figures are floats): the MFU ratio and MFUs against the dense peak, and
    what :func:`entry` decides from (``verified``, the spread
    of each side's timed runs, the submission's share of the measured matmul
    rate where one was measured)."""
    out = {"mfu_ratio": _digits(report.ratio)}
    for who, name in (("submission", "mfu_vs_dense_peak"), ("reference", "reference_mfu_vs_dense_peak")):
        vs_peak = report.mfu_vs_peak(who)
        if vs_peak is not None:
            out[name] = _digits(vs_peak)
    verified = report.verified and not report.isolation_violations and not report.impossible
    out["verified"] = 1.0 if verified else 0.0
    out["submission_spread"] = _digits(max(report.submission_seconds) / min(report.submission_seconds))
    out["reference_spread"] = _digits(max(report.reference_seconds) / min(report.reference_seconds))
    if report.matmul_flops:
        out["matmul_share"] = _digits(report.achieved("submission") / report.matmul_flops)
    return out


def _digits(x: float) -> float:
    """``x`` to 4 significant digits: what a board shows, and no more of a timing."""
    return float(f"{x:.4g}")


@dataclass(frozen=True)
class Entry:
    """One graded MFU as a leaderboard sees it (the ``--json`` problem's
    ``leaderboard`` object: :meth:`to_json`)."""

    board: str  # GPU | CPU stand-in
    verified: bool
    ratio: float  # the submission's MFU over the reference's, same run, same device
    mfu: float | None = None  # against the device's dense peak (None: not a GPU, or its peak unknown)
    reference_mfu: float | None = None
    doubts: list[str] = field(default_factory=list)  # why it is marked, not ranked

    @property
    def ranked(self) -> bool:
        """Whether it takes a place on its board: verified, and nothing in doubt."""
        return self.verified and not self.doubts

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ranked": self.ranked}

    @classmethod
    def from_json(cls, obj: Any) -> Entry | None:
        """The entry a ``--json`` problem object holds; None for anything else."""
        if not isinstance(obj, dict) or obj.get("board") not in BOARDS or not isinstance(obj.get("verified"), bool):
            return None
        numbers = {k: obj.get(k) for k in ("ratio", "mfu", "reference_mfu")}
        if not all(v is None or (_number(v) and math.isfinite(v)) for v in numbers.values()) \
                or numbers["ratio"] is None:
            return None
        doubts = obj.get("doubts", [])
        if not isinstance(doubts, list) or not all(isinstance(d, str) for d in doubts):
            return None
        return cls(obj["board"], obj["verified"], float(numbers["ratio"]),
                   None if numbers["mfu"] is None else float(numbers["mfu"]),
                   None if numbers["reference_mfu"] is None else float(numbers["reference_mfu"]), list(doubts))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def entry(recorded: Iterable[dict[str, float]], *, stand_in: bool) -> Entry | None:
    """The entry of a problem whose checks recorded ``recorded`` (each check's
    figures); None where no MFU was graded (no check recorded :func:`figures`:
    the problem did not run, or the check failed before it measured).
    ``stand_in``: the problem was graded with the CPU standing in for a GPU
    (its :attr:`~grader.results.ProblemResult.stand_in`): the stand-in's board."""
    figs: dict[str, float] = {}
    for f in recorded:
        figs.update(f)
    if "mfu_ratio" not in figs or "verified" not in figs:
        return None
    doubts = []
    if max(figs.get("submission_spread", 1.0), figs.get("reference_spread", 1.0)) > MAX_SPREAD:
        doubts.append(f"noisy: the slowest of its timed runs (or of the reference's) took more than {MAX_SPREAD:g} "
                      "times the fastest")
    if figs["mfu_ratio"] > MAX_SPEEDUP:
        doubts.append(f"suspiciously fast: more than {MAX_SPEEDUP:g} times the reference's MFU")
    if figs.get("matmul_share", 0.0) > 1.0:
        doubts.append("suspiciously fast: above the device's measured matmul rate")
    return Entry(board=STAND_IN if stand_in else GPU, verified=figs["verified"] == 1.0,
                 ratio=figs["mfu_ratio"], mfu=figs.get("mfu_vs_dense_peak"),
                 reference_mfu=figs.get("reference_mfu_vs_dense_peak"), doubts=doubts)


def gradescope_entries(e: Entry | None) -> list[dict[str, Any]]:
    """Gradescope's ``leaderboard`` entries (``name``, ``value``, ``order``)
    for an entry: none for an unverified run (it never enters); a ranked run's
    MFU (against the dense peak, where known) and MFU over the reference's,
    with a status column saying "verified"; a marked run only its status
    ("not ranked: ..."), so it takes no place in a numeric column. A CPU
    stand-in's columns are named so, apart from a GPU's."""
    if e is None or not e.verified:
        return []
    suffix = "" if e.board == GPU else f" ({STAND_IN}, a rehearsal)"
    if not e.ranked:
        return [{"name": f"MFU check{suffix}", "value": "not ranked: " + "; ".join(e.doubts)}]
    out: list[dict[str, Any]] = []
    if e.mfu is not None:
        out.append({"name": f"MFU (of dense peak){suffix}", "value": e.mfu, "order": "desc"})
    out.append({"name": f"MFU / reference MFU{suffix}", "value": e.ratio, "order": "desc"})
    out.append({"name": f"MFU check{suffix}", "value": "verified"})
    return out
