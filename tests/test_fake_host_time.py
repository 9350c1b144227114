"""Under ``--fake-cuda --gpu NAME`` the host half is measured for real: the fake GPU's
own time on every op that enters its mode (GPU or not) is the simulation's, not the script's,
with its way in and out calibrated per kind of op (exact on an injected clock), and every op that
enters its mode is noted (benchmarks/fake_host_time.py measures the demo's host time)."""

from __future__ import annotations

import pytest
import torch

import profilers
from profilers.timing import fake_time
from profilers.timing.fake_time import note_harness, scalar_operand
from profilers.timing.gpu_model.specs import gpu_spec
from profilers.timing.oplog import OpLog
from tests import conftest

needs_fake_cuda = pytest.mark.skipif(
    conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
)
aten = torch.ops.aten


def test_a_python_number_in_a_tensors_place_is_told_from_a_tensor_and_from_a_size():
    x = torch.ones(2, 2)
    assert scalar_operand(aten.mul.Tensor, (x, 1.5))
    assert scalar_operand(aten.add.Tensor, (x, 2))
    assert not scalar_operand(aten.mul.Tensor, (x, x))
    assert not scalar_operand(aten.sum.dim_IntList, (x, [1]))  # a size, not a tensor
    assert not scalar_operand(aten.add.Scalar, (x, 2))  # a Scalar slot: no tensor is made


def test_every_op_leaving_the_fake_gpu_adds_its_time_and_its_kinds_way_in_to_the_simulation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000]
    monkeypatch.setattr(fake_time, "thread_time_ns", lambda: now[0])
    log = OpLog(gpu=gpu_spec("H100"))
    log.entry_ns = [70, 300, 90, 500]  # host, GPU, host with a number, GPU with one
    monkeypatch.setattr(fake_time, "ACTIVE", log)
    x = torch.ones(4)
    # a host op (no GPU tensor): its 200 ns in the mode and the host way in, 70
    now[0] = 1_200
    note_harness(1_000, aten.relu.default, (x,))
    assert log._fake.sim == 270
    # a GPU op (the model predicted it inside the mode): 400 ns and the GPU way in, 300
    log._fake.gpu_op = fake_time.GPU_OP
    now[0] = 1_600
    note_harness(1_200, aten.relu.default, (x,))
    assert log._fake.sim == 270 + 700
    # a GPU op given a Python number for a tensor: 100 and 500
    log._fake.gpu_op = fake_time.GPU_OP
    now[0] = 1_700
    note_harness(1_600, aten.mul.Tensor, (x, 2.0))
    assert log._fake.sim == 970 + 600
    # the kind is the op's own: the next op is on the host again, with a number: 50 and 90
    now[0] = 1_750
    note_harness(1_700, aten.add.Tensor, (x, 1))
    assert log._fake.sim == 1_570 + 140
    monkeypatch.setattr(fake_time, "ACTIVE", None)
    note_harness(0, aten.relu.default, (x,))  # no log: nothing to add to, nothing raised
    assert log._fake.sim == 1_710


@pytest.mark.fake_cuda
@needs_fake_cuda
def test_the_fake_gpus_time_on_the_scripts_host_ops_is_the_simulations() -> None:
    # the wiring: each op entering the fake GPU's mode, on its GPU or not, is noted on the
    # way out (its time there and its kind's way in, at least), so the host time of the next
    # GPU op's record holds none of it
    from profilers.fake_cuda.harness import fake_cuda

    with fake_cuda(), profilers.profile(gpu="H100") as prof:
        log = prof._log
        assert log is not None
        h = torch.ones(8)
        h + 1  # warm: the line's first op is probed
        log._fake.sim = 0
        for _ in range(10):
            h = h + 1  # a host op, with a Python number for a tensor
        host_ops = log._fake.sim  # (a GPU op's record takes what was noted before it)
    assert all(ns > 0 for ns in log.entry_ns)
    assert host_ops >= 10 * log.entry_ns[fake_time.HOST_OP | fake_time.SCALAR]
    assert h.tolist() == [11.0] * 8
