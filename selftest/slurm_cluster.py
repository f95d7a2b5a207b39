"""A real single-node Slurm for the selftests (Debian's ``slurm-wlm`` and ``munge``).

:func:`unavailable` says why none can start here (a skip reason) or None.
:func:`single_node` starts one in a private temporary folder and yields a
:class:`Cluster`: munged with its own key and socket, slurmctld and slurmd on
free ports, one node (this machine, under the name ``labnode``) with this
machine's CPUs and two stand-in GPUs (gres ``gpu``), partitions ``cpu`` (the
default) and ``gpu``. It returns once ``sinfo`` shows the node idle, or raises
:class:`Unavailable` naming the daemon and its log when the daemons do not come
up within a bound. On exit every job is cancelled, the daemons stopped, and
any process left that was started by this cluster is killed and listed in
:attr:`Cluster.strays` (a test asserts there are none).

Nothing touches a system Slurm or munge: every path (state, spool, logs, pid
files, socket, key) is in the folder, the clients find it through the
``SLURM_CONF`` of :attr:`Cluster.env`, and the ports are free ones, not
Slurm's defaults. It needs root: slurmd starts jobs as their user, and munged
and the daemons run as root here (``SlurmUser=root``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: What the cluster runs: the daemons, and the clients the tests call.
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scontrol", "scancel")
#: A job state after which the job runs no more (Slurm's base states).
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE")
NODE = "labnode"
GPUS = 2
#: How long munged gets to make its socket.
MUNGE_BOUND_S = 10.0


class Unavailable(RuntimeError):
    """Slurm could not be started here; the message says why (a skip reason)."""


def unavailable() -> str | None:
    """Why no cluster can start on this machine, or None when one can be tried."""
    if not sys.platform.startswith("linux"):
        return "a real Slurm needs Linux"
    if os.geteuid() != 0:
        return "a real Slurm needs root (slurmd starts each job as its user; the daemons run as root here)"
    missing = [b for b in BINARIES if shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if missing:
        return f"no Slurm here: {', '.join(missing)} not found (Debian: apt-get install slurm-wlm munge)"
    return None


@dataclass
class Cluster:
    """A started single-node cluster; run its clients with :meth:`run`."""

    root: Path
    env: dict[str, str]
    strays: list[str] = field(default_factory=list)

    def run(self, *argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (``sbatch``, ``scontrol``...) against this cluster."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
                                 f"{self.log_tails()}")
        return proc

    def submit(self, script: Path, *options: str) -> str:
        """``sbatch --parsable [OPTIONS] SCRIPT``; the job id."""
        return self.run("sbatch", "--parsable", *options, str(script)).stdout.strip().split(";")[0]

    def jobs(self, job_id: str) -> list[dict[str, str]]:
        """``scontrol show job`` of a job (every task of an array job), as fields."""
        lines = self.run("scontrol", "--details", "--oneliner", "show", "job", job_id).stdout.splitlines()
        return [dict(w.split("=", 1) for w in line.split() if "=" in w) for line in lines if line.strip()]

    def wait(self, job_id: str, bound_s: float) -> list[dict[str, str]]:
        """:meth:`jobs` once every task of the job has finished; AssertionError,
        with the queue and the daemons' logs, after ``bound_s``. Polled twice a
        second: ``sbatch --wait`` looks at growing intervals (a task that took
        about 40 s was reported done at 74 s), which would add a minute to a test."""
        deadline = time.monotonic() + bound_s
        while True:
            tasks = self.jobs(job_id)
            if tasks and all(t.get("JobState") in FINISHED for t in tasks):
                return tasks
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not finished after {bound_s:.0f} s: "
                                     f"{[(t.get('JobId'), t.get('JobState')) for t in tasks]}\n"
                                     f"{self.run('squeue', check=False).stdout}{self.log_tails()}")
            time.sleep(0.5)

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of each daemon's log, for a failure message."""
        out = []
        for log in sorted((self.root / "log").glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"\n--- {log.name}\n" + "\n".join(tail))
        return "".join(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path, host: str) -> str:
    cpus = os.cpu_count() or 1
    return f"""\
ClusterName=labtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
MailProg=/bin/true
# No systemd and no cgroup v2 needed: processes tracked by /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Starts a job (and a dependent one) at once, not at a backfill pass.
SchedulerType=sched/builtin
ReturnToService=2
# Finished jobs stay visible to scontrol while a test reads them.
MinJobAge=3600
# A job cancelled at the end goes within seconds, not Slurm's default 30.
KillWait=5
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=cpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={NODE} MaxTime=INFINITE State=UP
"""


def _stand_in_gpus(root: Path) -> str:
    """gres.conf for :data:`GPUS` stand-in GPUs. Slurm 22.05 drops a GPU without
    a ``File`` and wants a device there: each is a character device with
    /dev/null's numbers (a regular file where mknod is refused; slurmd then
    logs an error but still counts it)."""
    (root / "dev").mkdir()
    for i in range(GPUS):
        path = root / "dev" / f"gpu{i}"
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            path.touch()
    return f"NodeName={NODE} Name=gpu File={root}/dev/gpu[0-{GPUS - 1}]\n"


def processes_of(root: Path) -> list[int]:
    """Processes started by this cluster: their environment names its slurm.conf
    (the daemons, slurmstepd and every job inherit it)."""
    marker = f"SLURM_CONF={root}/slurm.conf".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def _describe(pid: int) -> str:
    try:
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        argv = "?"
    return f"{pid} {argv}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def _wait_idle(cluster: Cluster, daemons: dict[str, subprocess.Popen[bytes]], bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    state = ""
    while time.monotonic() < deadline:
        for name, proc in daemons.items():
            if proc.poll() is not None:
                raise Unavailable(f"{name} exited ({proc.returncode}) while the cluster started{cluster.log_tails()}")
        proc = cluster.run("sinfo", "--noheader", "--nodes", NODE, "--format", "%t", check=False, timeout=20)
        state = proc.stdout.strip()
        if proc.returncode == 0 and state.split() and all(s == "idle" for s in state.split()):
            return
        time.sleep(0.25)  # polling daemons that start in their own time
    raise Unavailable(f"node {NODE} not idle {bound_s:.0f} s after the daemons started "
                      f"(sinfo: {state!r}){cluster.log_tails()}")


@contextlib.contextmanager
def single_node(start_bound_s: float = 60) -> Iterator[Cluster]:
    """Start the cluster (see the module's docstring); stop it and everything it
    ran on exit, also when it did not come up. ``start_bound_s``: how long the
    node may take to show idle once the daemons are started."""
    why = unavailable()
    if why:
        raise Unavailable(why)
    # Not under pytest's tmp_path: munged wants every folder above its socket
    # searchable by all, and a Unix socket's path must stay short.
    root = Path(tempfile.mkdtemp(prefix="lab-slurm-"))
    root.chmod(0o711)
    for d in ("state", "spool", "log"):
        (root / d).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]  # slurmctld starts only on the host its SlurmctldHost names
    (root / "slurm.conf").write_text(_config(root, host))
    (root / "gres.conf").write_text(_stand_in_gpus(root))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/sbin"
    cluster = Cluster(root, env)
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    commands = {
        "munged": ["munged", "--foreground", f"--socket={root}/munge.socket", f"--key-file={key}",
                   f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed",
                   f"--log-file={root}/log/munged.log"],
        "slurmctld": ["slurmctld", "-D", "-f", str(root / "slurm.conf")],
        "slurmd": ["slurmd", "-D", "-f", str(root / "slurm.conf"), "-N", NODE],
    }
    try:
        for name, argv in commands.items():
            with open(root / "log" / f"{name}.out", "wb") as out:
                daemons[name] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
            if name == "munged":  # slurmctld authenticates through it from its first moment
                deadline = time.monotonic() + MUNGE_BOUND_S
                while not (root / "munge.socket").exists():
                    if daemons[name].poll() is not None or time.monotonic() > deadline:
                        raise Unavailable(f"munged did not start{cluster.log_tails()}")
                    time.sleep(0.05)
        _wait_idle(cluster, daemons, start_bound_s)
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            if daemons.get("slurmctld") and daemons["slurmctld"].poll() is None:
                cluster.run("scancel", "--user", "root", check=False, timeout=20)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and cluster.run(
                        "squeue", "--noheader", "--format=%i", check=False, timeout=20).stdout.strip():
                    time.sleep(0.25)  # cancelled jobs take their KillWait to go
        for name in ("slurmd", "slurmctld", "munged"):
            if name in daemons:
                _stop(daemons[name])
        for pid in processes_of(root):
            cluster.strays.append(_describe(pid))
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
