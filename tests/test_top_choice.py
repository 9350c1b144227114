"""``gpuwatch top --only``, ``--only-visible`` and the process filters."""

from __future__ import annotations

import pytest

from gpuwatch.monitor.nvml import FakeBackend
from gpuwatch.monitor.nvml.chosen import (
    ChoiceError,
    ChosenBackend,
    ProcessFilter,
    parse_only,
    visible_indices,
)
from gpuwatch.ui.top.app import TopApp
from gpuwatch.ui.widgets import GpuCard, ProcessTable
from tests.conftest import wait_until


def test_cuda_visible_devices_by_index_uuid_prefix_and_mig(clock):
    backend = FakeBackend(gpu_count=4, clock=clock)
    assert visible_indices(backend, "3,1") == [1, 3]
    assert visible_indices(backend, "GPU-demo0002,demo0000") == [0, 2]  # with or without GPU-
    mig = "MIG-GPU-demo0003-0000-0000-0000-000000000000/1/0"
    assert visible_indices(backend, mig) == [3]  # the GPU the instance is part of
    assert visible_indices(backend, "0,-1,2") == [0]  # CUDA stops at the first invalid one
    with pytest.raises(ChoiceError, match="cannot say which GPU it is part of"):
        visible_indices(backend, "MIG-5f7e0b5a-1111-2222-3333-444444444444")  # demo: no MIG
    with pytest.raises(ChoiceError, match="GPU-demo names no single GPU"):
        visible_indices(backend, "GPU-demo")
    assert visible_indices(backend, "") == []
    with pytest.raises(ChoiceError, match="GPUs 0 to 3"):
        parse_only("1,9", 4)


def test_a_mig_instance_by_its_own_uuid_shows_its_gpu_through_nvml(clock):
    from gpuwatch.monitor.nvml._real import RealBackend
    from gpuwatch.monitor.nvml.chosen import resolve_visible
    from tests.stub_nvml import StubNvml, default_device

    devices = [default_device(i) for i in range(3)]
    devices[2]["mig"] = ["MIG-5f7e0b5a-1111-2222-3333-444444444444"]
    backend = RealBackend(nvml=StubNvml(devices), clock=clock)
    try:
        assert backend.gpu_of_mig("MIG-5f7e0b5a-1111-2222-3333-444444444444") == 2
        assert backend.gpu_of_mig("MIG-ffffffff-0000-0000-0000-000000000000") is None
        visible = "MIG-5f7e0b5a-1111-2222-3333-444444444444,0"
        assert visible_indices(backend, visible) == [0, 2]
        with pytest.raises(ChoiceError, match="MIG-ffffffff names no single GPU"):
            visible_indices(backend, "MIG-ffffffff")
    finally:
        backend.close()
    # The same rules without NVML, from the GPUs' UUIDs alone (the report's samples):
    uuids = {0: "GPU-0a1b-ffff", 1: "GPU-2c3d-eeee"}
    assert resolve_visible("GPU-2c3d,0a1b", uuids) == [1, 0]  # CUDA device 0 is GPU 1
    assert resolve_visible("MIG-GPU-0a1b-ffff/1/0,MIG-77", uuids) == [0, None]
    assert resolve_visible("1,7,0", uuids, count=2) == [1]  # CUDA stops at the first invalid one


async def test_only_some_gpus_keep_their_numbers_and_filters_narrow_processes(clock):
    backend = FakeBackend(gpu_count=4, clock=clock)
    chosen = ChosenBackend(backend, [1, 3], ProcessFilter(users=("alice",)))
    app = TopApp(chosen, interval_s=0.1)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(lambda: app.samples_taken >= 1)
        await pilot.pause()
        assert [c.id for c in app.query(GpuCard)] == ["gpu-1", "gpu-3"]
        assert app.query_one("#gpu-3", GpuCard).border_title.startswith("GPU 3 ·")
        shown = app.query_one(ProcessTable).shown_processes
        assert shown and {p.user for p in shown} == {"alice"}
        assert {p.gpu_index for p in shown} <= {1, 3}
