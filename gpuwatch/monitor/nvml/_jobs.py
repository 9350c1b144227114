"""Which job a GPU process belongs to, read from ``/proc/PID``: SLURM's job and user and a
launcher's ``RANK`` from its environment, its container and Kubernetes pod from its cgroup.

``/proc/PID/environ`` is readable only by the process's owner (and root): for another user's
process the environment says nothing, and the cgroup (readable by all) still gives the SLURM
job, the container and the pod. The file reader is injected so that tests need no such process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from gpuwatch.monitor.nvml.samples import JobInfo

#: ``path -> bytes``, or None where the file cannot be read (gone, no permission).
ProcReader = Callable[[str], bytes | None]

#: The most read of one /proc file (an environment is at most a few hundred KiB).
_MAX_READ = 1 << 20

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
_CONTAINER = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)")
_SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")
_SLURM_UID = re.compile(r"/uid_(\d+)/")
_NAMESPACE_FILE = "root/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def read_proc(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_READ)
    except OSError:
        return None


def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/PID/environ`` (NUL-separated ``NAME=value``) as a dict."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, eq, value = item.partition(b"=")
        if eq and name:
            out[name.decode(errors="replace")] = value.decode(errors="replace")
    return out


def job_info(
    environ: dict[str, str] | None, cgroup: str | None, namespace_file: str | None = None
) -> JobInfo | None:
    """A process's job from what could be read of it; None when nothing could."""
    if environ is None and cgroup is None:
        return None
    env = environ or {}
    cg = cgroup or ""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        job = f"{array}_{task}"  # NB: squeue's name for an array task; its own id is internal
    if job is None and (m := _SLURM_JOB.search(cg)):
        job = m.group(1)
    user = env.get("SLURM_JOB_USER")
    if user is None and job is not None and (m := _SLURM_UID.search(cg)):
        user = f"uid {m.group(1)}"
    rank = env.get("RANK", "")
    pod_uid = m.group(1).replace("_", "-") if (m := _POD_UID.search(cg)) else None
    containers = _CONTAINER.findall(cg)
    in_pod = pod_uid is not None
    namespace = env.get("POD_NAMESPACE") or (namespace_file or "").strip() or None
    return JobInfo(
        slurm_job_id=job,
        slurm_user=user,
        rank=int(rank) if rank.isdigit() else None,
        container=containers[-1][:12] if containers else None,
        # NB: kubelet sets a container's HOSTNAME to its pod's name (hostNetwork pods excepted,
        # where POD_NAME from the downward API is the only honest source).
        pod=(env.get("POD_NAME") or env.get("HOSTNAME")) if in_pod else None,
        pod_uid=pod_uid,
        namespace=namespace if in_pod else None,
    )


class Jobs:
    """Each process's :class:`JobInfo`, read once per process (its environment never changes
    after it starts) and forgotten when the process is no longer seen."""

    def __init__(self, read: ProcReader = read_proc, proc: str = "/proc") -> None:
        self._read = read
        self._proc = proc
        self._known: dict[tuple[int, float | None], JobInfo | None] = {}

    def of(self, pid: int, start_time: float | None) -> JobInfo | None:
        key = (pid, start_time)
        if key not in self._known:
            base = f"{self._proc}/{pid}"
            env = self._read(f"{base}/environ")
            cgroup = self._read(f"{base}/cgroup")
            cg = None if cgroup is None else cgroup.decode(errors="replace")
            ns = self._read(f"{base}/{_NAMESPACE_FILE}") if cg and _POD_UID.search(cg) else None
            self._known[key] = job_info(
                None if env is None else parse_environ(env),
                cg,
                None if ns is None else ns.decode(errors="replace"),
            )
        return self._known[key]

    def keep_only(self, pids: Collection[int]) -> None:
        """Forget processes whose pid is not among ``pids`` (so a long run's cache stays
        small); a pid reused by a new process has a new start time, so a new entry."""
        for key in [k for k in self._known if k[0] not in pids]:
            del self._known[key]
