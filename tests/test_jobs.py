"""Each GPU process's job from /proc/PID (environment, cgroup): SLURM, containers, Kubernetes
pods, torchrun ranks; what cannot be read is not said."""

from __future__ import annotations

import os

import psutil

from gpuwatch.monitor.nvml._jobs import Jobs, job_info, parse_environ
from gpuwatch.monitor.nvml._real import RealBackend
from gpuwatch.monitor.nvml.samples import JobInfo
from tests.stub_nvml import StubNvml, default_device, proc

POD_UID = "5b1c7c9e-2f3d-4d1e-9a7b-0c6d8e2f1a34"
CTR = "3f2a9c1d0b7e" + "a" * 52


def env(**kw: str) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in kw.items())


def test_environ_is_parsed_with_values_holding_equals_signs():
    assert parse_environ(b"A=1\0B=x=y\0\0junk\0") == {"A": "1", "B": "x=y"}


def test_slurm_job_user_and_rank_from_the_environment():
    info = job_info(
        {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice", "RANK": "3"},
        "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
    )
    assert info == JobInfo(slurm_job_id="4242", slurm_user="alice", rank=3)
    assert info.label == "slurm 4242 r3"


def test_an_array_task_is_named_as_squeue_names_it():
    info = job_info(
        {"SLURM_JOB_ID": "991", "SLURM_ARRAY_JOB_ID": "990", "SLURM_ARRAY_TASK_ID": "7"}, ""
    )
    assert info is not None and info.slurm_job_id == "990_7"


def test_unreadable_environment_still_gives_the_slurm_job_from_the_cgroup():
    v1 = "4:memory:/slurm/uid_1001/job_77/step_batch/task_0\n"
    assert job_info(None, v1) == JobInfo(slurm_job_id="77", slurm_user="uid 1001")
    v2 = "0::/system.slice/slurmstepd.scope/job_78/step_0/user/task_0\n"
    assert job_info(None, v2) == JobInfo(slurm_job_id="78")
    assert job_info(None, None) is None  # nothing readable: not said


def test_kubernetes_pod_from_the_cgroup_and_its_name_from_hostname():
    systemd = (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{POD_UID.replace('-', '_')}.slice/cri-containerd-{CTR}.scope\n"
    )
    info = job_info({"HOSTNAME": "trainer-0"}, systemd, "research\n")
    assert info == JobInfo(
        container=CTR[:12], pod="trainer-0", pod_uid=POD_UID, namespace="research"
    )
    assert info.label == "research/trainer-0"
    cgroupfs = f"11:devices:/kubepods/besteffort/pod{POD_UID}/{CTR}\n"
    got = job_info(None, cgroupfs)
    assert got == JobInfo(container=CTR[:12], pod_uid=POD_UID)
    assert got is not None and got.label == "pod 5b1c7c9e"


def test_a_docker_container_outside_kubernetes_has_no_pod():
    info = job_info({"HOSTNAME": "abc", "RANK": "x"}, f"0::/system.slice/docker-{CTR}.scope\n")
    assert info == JobInfo(container=CTR[:12])  # a RANK that is no number is not a rank
    assert info.label == "ctr 3f2a9c1d0b7e"


def test_jobs_read_each_process_once_and_forget_it_when_gone():
    reads: list[str] = []
    files = {
        "/proc/10/environ": env(SLURM_JOB_ID="5", RANK="1"),
        "/proc/10/cgroup": b"0::/user.slice\n",
    }

    def read(path: str) -> bytes | None:
        reads.append(path)
        return files.get(path)

    jobs = Jobs(read)
    assert jobs.of(10, 1.0) == JobInfo(slurm_job_id="5", rank=1)
    assert jobs.of(10, 1.0) == JobInfo(slurm_job_id="5", rank=1)
    assert reads == ["/proc/10/environ", "/proc/10/cgroup"]
    assert jobs.of(11, 2.0) is None  # nothing readable
    jobs.keep_only({11})
    jobs.of(10, 1.0)
    assert reads.count("/proc/10/environ") == 2


def test_the_real_backend_gives_each_process_its_job(clock):
    me = os.getpid()
    dev = default_device(0)
    dev["compute"] = [proc(me, 1 << 30)]
    files = {
        f"/proc/{me}/environ": env(SLURM_JOB_ID="4242", SLURM_JOB_USER="alice", RANK="0"),
        f"/proc/{me}/cgroup": b"0::/system.slice/slurmstepd.scope/job_4242/step_0\n",
    }
    backend = RealBackend(nvml=StubNvml([dev]), clock=clock, read_proc=files.get)
    (p,) = backend.sample(0).processes
    assert p.pid == me and p.start_time == psutil.Process(me).create_time()
    assert p.job == JobInfo(slurm_job_id="4242", slurm_user="alice", rank=0)
    assert p.to_dict()["job"]["slurm_job_id"] == "4242"


def test_this_process_own_proc_files_are_read_for_real():
    info = Jobs().of(os.getpid(), None)
    assert info is not None  # our own environment and cgroup are readable
    assert info.rank == (int(os.environ["RANK"]) if os.environ.get("RANK", "").isdigit() else None)
