"""What the grading processes tell each other, as typed records with their JSON in one place.

Three hops, all between trusted processes (the submission's worker speaks
tests/wire.py, never this):

* engine -> trusted pytest process: a :class:`GroupSpec`, written as JSON to a
  file the environment variable :data:`PLAN_ENV` names (``GroupSpec.to_json`` /
  ``GroupSpec.from_json``);
* trusted pytest process -> engine: *events*, one JSON object per line on the
  inherited pipe ``GroupSpec.results_fd`` (there is no results file a submission
  could find and forge), as they happen: ``{"event": "start", "problem",
  "checks"}`` (a problem's first check starts; how many it has),
  ``{"event": "check", "problem", "outcome"}`` (one check ended), ``{"event":
  "end", "problem", "run"}`` (a problem's last check ended: its
  :class:`ProblemRun`, its checks' :class:`CheckOutcome` and its
  :class:`WorkerRecord`) and, last, ``{"event": "session", "cost"}`` (the
  run's own figures, a :class:`Cost`). The first two only
  inform (:mod:`grader.report.progress`); the engine scores each problem as
  its ``end`` comes, so a run stopped from outside keeps what it finished;
* engine -> reports (and the ``--json`` file other tools read): a failed
  item's first failure as a :class:`Failure`, structured fields that the reports
  render and nothing parses back.

:meth:`ProblemRun.from_json` is where everything a grading run says reaches
the engine, and so every report: it is the one place that normalises its
strings (:func:`grader.util.feedback_text`: no terminal controls, no lone
surrogates or other code points UTF-8 or XML cannot hold, the student's own
paths). Submission text gets into them by many routes inside the trusted
pytest process (an error reply's message and traceback, a returned string an
assertion quotes, the worker's output), all through here.

``from_json`` fills in the defaults of fields an older or partial record
leaves out (the selftests build partial records by hand) and ignores keys it
does not know; it never raises on a missing field of a record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from grader.rubric import is_hidden
from grader.sandbox.isolation import Sandbox
from grader.sandbox.limits import Limits
from grader.sandbox.problemstate import ProblemSpec, WorkerRecord  # (defined in the sandbox, which fills them)
from grader.util import feedback_text, printable

#: The environment variable naming the :class:`GroupSpec` file of a trusted pytest process.
PLAN_ENV = "GRADER_PLAN"


def _known(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw``'s keys that are fields of the dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in raw.items() if k in names}


# --------------------------------------------------------------------------- engine -> trusted pytest process
@dataclass(frozen=True)
class SandboxSpec:
    """The engine's resolved :class:`grader.sandbox.isolation.Sandbox`: its mode
    and why, whether CUDA is present and the limits (every per-worker limit,
    :class:`grader.sandbox.limits.Limits`), so the plugin restores it without
    probing again."""

    mode: str  # bwrap | uid | rlimits
    why: str
    cuda: bool
    limits: Limits
    uid: int = -1  # the worker's uid and gid (uid mode)
    gid: int = -1

    @classmethod
    def of(cls, sandbox: Sandbox) -> SandboxSpec:
        return cls(sandbox.mode, sandbox.why, sandbox.cuda, sandbox.limits, sandbox.uid, sandbox.gid)

    def sandbox(self) -> Sandbox:
        """The same sandbox, without a second probe (its mode was decided by
        the engine, in this very run)."""
        return Sandbox.restored(self.mode, self.why, limits=self.limits, cuda=self.cuda, uid=self.uid, gid=self.gid)


@dataclass(frozen=True)
class GroupSpec:
    """What one group's trusted pytest process runs, and where.

    ``name`` is the submission as the instructor named it; ``repo`` the
    grader's checkout (the tests and hidden checks); ``work`` the submission's
    working copy the workers import; ``scratch`` the only folder they may
    write. The workers' limits (a call's CPU seconds, a fork server's start-up,
    the wall-clock backstop among them) are ``sandbox.limits``. ``results_fd``
    is the write end of the events pipe to the engine. ``seed`` seeds the
    hidden checks' draws (:func:`grader.plugin.hidden_seed`). ``hidden``: this
    run serves hidden checks (its workers' troubles are told in fixed words:
    :mod:`grader.sandbox.remote`). ``stand_in``: where there is no CUDA
    device, the GPU problems' checks run on the CPU standing in for one (a
    rehearsal of the GPU pipeline: ``python -m grader --cpu-stand-in``).
    """

    name: str
    repo: str
    work: str
    scratch: str
    profile: str
    problems: tuple[ProblemSpec, ...]
    sandbox: SandboxSpec
    results_fd: int
    seed: int
    hidden: bool = False
    stand_in: bool = False

    @property
    def gpu_lock_problems(self) -> list[str]:
        return [p.name for p in self.problems if p.gpu_lock]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GroupSpec:
        raw = json.loads(text)
        sb = raw["sandbox"]
        return cls(**{
            **raw,
            "problems": tuple(ProblemSpec(**{**p, "files": tuple(p["files"])}) for p in raw["problems"]),
            "sandbox": SandboxSpec(sb["mode"], sb["why"], sb["cuda"], Limits(**sb["limits"]), sb.get("uid", -1),
                                   sb.get("gid", -1)),
        })


# --------------------------------------------------------------------------- trusted pytest process -> engine
COLLECT_ERROR = "collect-error"


#: :attr:`CheckOutcome.cause`: the submission's code could not be loaded in the
#: worker (it raised SyntaxError, ImportError or SystemExit there; grader.outcomes.cause).
IMPORT = "import"
#: :attr:`CheckOutcome.cause`: the worker died or broke the protocol.
CRASH = "crash"


@dataclass
class CheckOutcome:
    """One check (a pytest node) as the trusted pytest process saw it.

    ``test`` is its node id (``<collect>`` and the file's node id for a
    collect error). ``outcome``: passed | failed | error | skipped |
    collect-error (a check file that did not load; ``file`` is then its node
    id). ``message``/``example`` are the failure's text and hypothesis's
    falsifying example. ``duration`` is setup to teardown on the trusted
    process's clock, ``cpu`` the CPU seconds the problem's workers used
    meanwhile (read from outside). ``outcome`` may also be "timeout" (a call
    ran past its limit), "not run" (the problem's budget was spent before the
    check could end) or "grader error" (the machine or the grader failed).
    ``gpu_marked``: the check has the ``gpu`` marker (it needs CUDA).
    ``extends`` and ``input_kind`` are what a hidden check declared (its
    ``extends`` marker, its ``input_kind(...)`` facts), read from the test
    item on the trusted side. ``figures``: the numbers a check measured on
    the trusted side and recorded with pytest's ``record_property`` (the MFU
    check's ratio, say). ``item`` is the rubric item it counts toward, set by
    :mod:`grader.scoring` ("" when it maps to none or several: all items).
    """

    test: str
    problem: str
    file: str
    outcome: str = "passed"
    cause: str = ""  # "" | "import" | "crash": a failure's class, from its exceptions' types (grader.outcomes.cause)
    message: str = ""
    example: str = ""
    gpu_marked: bool = False
    duration: float = 0.0
    cpu: float = 0.0
    extends: str = ""
    input_kind: dict[str, str] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    item: str = ""

    @property
    def hidden(self) -> bool:
        """A hidden check's (its file is not a public test file)."""
        return is_hidden(self.file)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CheckOutcome:
        """The outcome in ``raw`` (normalised by :meth:`ProblemRun.from_json`),
        its numbers as floats and its hidden check's declarations sanitised."""
        c = cls(**{"test": "", "problem": "", "file": "", **_known(cls, raw)})
        c.duration, c.cpu = float(c.duration), float(c.cpu)
        c.extends, c.input_kind = _extends(c.extends), _input_kind(c.input_kind)
        return c


def _extends(value: Any) -> str:
    """The node id an ``extends`` marker named, if it is a public test's (else "")."""
    if not isinstance(value, str):
        return ""
    value = value.split("[")[0]
    path, _, name = value.partition("::")
    return value if path.startswith("tests/test_") and path.endswith(".py") and name.isidentifier() else ""


def _input_kind(value: Any) -> dict[str, str]:
    """A hidden check's declared kind of input: at most 12 short printable words."""
    if not isinstance(value, dict):
        return {}
    return {_short(str(k), 40): _short(str(v), 120) for k, v in list(value.items())[:12]}


def _short(text: str, limit: int) -> str:
    text = printable(text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass
class Cost:
    """Where one trusted pytest process's CPU went, in CPU seconds: its own
    start-up (interpreter, torch, pytest, collecting the check files:
    ``startup``) and in all (``trusted``: the checks' oracles, hypothesis, the
    wire), the fork servers it started (``servers``, their start-ups:
    ``server_start``, each imports torch once), the workers they forked
    (``workers``) and sealing torch.optim's sources (``seal``); and the most
    its scratch folder held (``scratch_peak_bytes``, ``scratch_peak_entries``:
    :class:`grader.sandbox.scratch.ScratchWatch`). The submission's own CPU
    is in each problem's :class:`WorkerRecord`."""

    startup: float = 0.0
    trusted: float = 0.0
    servers: int = 0
    server_start: float = 0.0
    workers: int = 0
    seal: float = 0.0
    scratch_peak_bytes: int = 0
    scratch_peak_entries: int = 0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Cost:
        return cls(**_known(cls, raw))


@dataclass
class ProblemRun:
    """One problem as one trusted pytest process ran it in one phase
    (``hidden``: the phase of hidden checks).

    ``checks`` are its checks' outcomes in the order they ran (the run's
    collect errors among them); ``worker`` its :class:`WorkerRecord`. ``lost``
    says why the process ended without this problem's results ("" when it
    sent them), ``log`` holds that process's output's tail (instructors only);
    both are the engine's own (:func:`grader.groups.run_pytest`).
    """

    problem: str
    hidden: bool
    checks: list[CheckOutcome] = field(default_factory=list)
    worker: WorkerRecord | None = None
    lost: str = ""
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: str | bytes | dict[str, Any]) -> ProblemRun:
        """The run a trusted pytest process sent, every string in it (keys
        included) normalised by :func:`grader.util.feedback_text`."""
        d = _normalised(json.loads(raw) if isinstance(raw, str | bytes) else raw)
        worker = d.get("worker")
        return cls(**{
            **_known(cls, d), "problem": str(d.get("problem", "")), "hidden": bool(d.get("hidden", False)),
            "checks": [CheckOutcome.from_json(c) for c in d.get("checks", []) if isinstance(c, dict)],
            # (looked up at call time: a selftest puts a subclass with a field of its own here)
            "worker": WorkerRecord.from_json(worker) if isinstance(worker, dict) else None,
        })


def _normalised(value: Any) -> Any:
    """``value`` (decoded JSON) with :func:`grader.util.feedback_text` applied to every string."""
    if isinstance(value, str):
        return feedback_text(value)
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    if isinstance(value, dict):
        return {_normalised(k): _normalised(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- engine -> reports
@dataclass
class Failure:
    """The first failure of an item, as fields (reports render them; nothing parses text).

    Every field is computed on the trusted side: the check's node id, the
    rubric, the public tests' source (the property: the first paragraph of the
    docstring of the public test, or of the public test a hidden check
    extends), the hidden check's declared input kind, and the assertion
    message of the trusted test process. ``message`` and ``example`` are empty
    for a hidden check unless revealed (they may hold the hidden inputs).
    """

    test: str  # node id; for a withheld hidden check, its function name only
    hidden: bool
    outcome: str
    property_test: str = ""  # the public test (node id, no parameters) stating the property
    property: str = ""  # that test's docstring summary
    input_kind: dict[str, str] = field(default_factory=dict)
    parameters: list[str] = field(default_factory=list)  # word-like pytest parametrize ids (e.g. "Adam")
    message: str = ""
    example: str = ""
    reproduce: str = ""  # a pytest command line for the public test
    withheld: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``failure`` object of the ``--json`` file (see grader/report/render.py)."""
        return asdict(self)
