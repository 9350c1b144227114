"""--fake-cuda on the everyday code of a training script: formatting and printing GPU tensors
(what a print reads, counted as on a GPU: torch/_tensor_str.py), torch.save, the memory
statistics, the RNG state, CUDA graphs, NVTX, and one line for what cannot be simulated."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import profilers
from tests import conftest
from tests.profiler_helpers import copies, line_at, line_of

pytestmark = [
    pytest.mark.fake_cuda,
    pytest.mark.skipif(
        conftest.FAKE_CUDA_MISSING is not None, reason=str(conftest.FAKE_CUDA_MISSING)
    ),
    pytest.mark.usefixtures("both_paths"),  # the exact counts hold on both counting paths
]


def profiled(fn, devices: int = 1, values: str | None = None):
    from profilers.fake_cuda.harness import fake_cuda

    with (
        fake_cuda(devices, values=values) as harness,
        profilers.profile(kernel_timing=False) as prof,
    ):
        fn()
    return prof.report(), harness


def test_a_loss_formats_as_its_item_one_sync():
    out: list[str] = []

    def work():
        model = nn.Linear(8, 1).to("cuda")
        loss = model(torch.randn(4, 8).to("cuda")).square().mean()
        out.append(f"loss {loss:.4f}")  # @format
        out.append(f"{loss}")  # @plain

    r, _ = profiled(work, values="placeholder")
    assert out == ["loss 0.0000", "0.0"]
    for marker in ("format", "plain"):
        line = line_at(r, line_of(marker))
        assert line.syncs.to_dict() == {"count": 1, "by_cause": {"item": 1}}
        assert line.d2h.counts() == copies(count=1, bytes=4, pageable=1)


def test_printing_shows_placeholders_as_a_gpu_prints_them():
    shown: list[str] = []

    def work():
        shown.append(repr(torch.randn(4).to("cuda")))
        shown.append(str(torch.arange(3).to("cuda:1")))
        shown.append(f"{torch.randn(2, 2, dtype=torch.float16).to('cuda')}")
        w = nn.Linear(2, 1).to("cuda").weight
        shown.append(repr(w))
        shown.append(repr(w * 2))
        shown.append(repr(torch.empty(0, 3).to("cuda")))

    profiled(work, devices=2, values="placeholder")
    assert shown == [
        "tensor([0., 0., 0., 0.], device='cuda:0')",
        "tensor([0, 0, 0], device='cuda:1')",
        "tensor([[0., 0.],\n        [0., 0.]], device='cuda:0', dtype=torch.float16)",
        "Parameter containing:\ntensor([[0., 0.]], device='cuda:0', requires_grad=True)",
        "tensor([[0., 0.]], device='cuda:0', grad_fn=<MulBackward0>)",
        "tensor([], device='cuda:0', size=(0, 3))",
    ]


def test_a_print_counts_what_it_reads_by_dtype():
    def work():
        ints = torch.arange(3).to("cuda")
        floats = torch.randn(4).to("cuda")
        print(ints)  # @print_int
        print(floats)  # @print_float

    r, harness = profiled(work, values="placeholder")
    ints = line_at(r, line_of("print_int"))
    # f"{value}" of each element: 3 .item() of 8 bytes; then one tolist() of the row (24 bytes)
    assert ints.d2h.counts() == copies(count=3 + 1, bytes=3 * 8 + 24, pageable=4)
    assert ints.syncs.by_cause == {"item": 3, "copy_to_host": 1}
    floats = line_at(r, line_of("print_float"))
    # masked_select of the finite non-zero values (every element kept: 4), then bool reads of
    # one byte: 4 `value != ceil(value)`, 2 for sci_mode's first two tests, 1 `if sci_mode`
    # and 4 more in format() (sci_mode stays a tensor); 4 float32 widths; one tolist() (16 B)
    bools, widths = 4 + 2 + 1 + 4, 4
    assert floats.syncs.by_cause == {
        "data_dependent_shape": 1,
        "item": bools + widths,
        "copy_to_host": 1,
    }
    assert floats.d2h.counts() == copies(
        count=bools + widths + 1, bytes=bools + widths * 4 + 16, pageable=bools + widths + 1
    )
    assert harness.placeholders.values == 3 + bools + widths


def test_printing_a_host_tensor_reads_nothing_from_the_gpu():
    def work():
        print(torch.arange(3))  # @host

    r, _ = profiled(work)
    assert not [s for s in r.lines if s.line == line_of("host") and s.syncs.count]


def test_torch_save_copies_each_tensor_to_the_host_and_loads_back(tmp_path):
    path = tmp_path / "ckpt.pt"

    def work():
        model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).to("cuda")
        torch.save(model.state_dict(), path)  # @save

    r, _ = profiled(work, values="placeholder")
    line = line_at(r, line_of("save"))
    # 7 tensors: weight 12 + bias 4 + 4 x BatchNorm's 4 floats = 32 floats, + one int64 counter
    assert line.d2h.counts() == copies(count=7, bytes=32 * 4 + 8, pageable=7)
    assert line.syncs.by_cause == {"copy_to_host": 7}
    loaded = torch.load(path, map_location="cpu")
    assert {k: (tuple(v.shape), v.dtype) for k, v in loaded.items()} == {
        "0.weight": ((4, 3), torch.float32),
        "0.bias": ((4,), torch.float32),
        "1.weight": ((4,), torch.float32),
        "1.bias": ((4,), torch.float32),
        "1.running_mean": ((4,), torch.float32),
        "1.running_var": ((4,), torch.float32),
        "1.num_batches_tracked": ((), torch.int64),
    }
    assert all(v.device.type == "cpu" and not v.any() for v in loaded.values())
    with pytest.raises(RuntimeError, match="CUDA device"):  # a GPU checkpoint, as on a GPU
        torch.load(path)


class TiedLM(nn.Module):
    """nanoGPT's weight tying: the output layer is the token embedding."""

    def __init__(self, vocab: int = 16, width: int = 8) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_torch_save_copies_a_storage_shared_by_tied_weights_once(tmp_path, zipfile):
    path = tmp_path / "ckpt.pt"
    seen: dict[str, object] = {}

    def work():
        model = TiedLM().to("cuda")
        state = model.state_dict()
        seen["keys"] = sorted(state)
        # NB: state_dict() detaches: two tensor objects, one storage (torch/serialization.py
        # saves it once: _save's id_map and _legacy_save's serialized_storages, by _cdata)
        torch.save(state, path, _use_new_zipfile_serialization=zipfile)  # @tied

    r, _ = profiled(work, values="placeholder")
    assert seen["keys"] == ["lm_head.weight", "wte.weight"]
    # one copy of the shared 16 x 8 floats: 16 * 8 * 4 = 512 bytes, not two
    line = line_at(r, line_of("tied"))
    assert line.d2h.counts() == copies(count=1, bytes=512, pageable=1)
    assert line.syncs.by_cause == {"copy_to_host": 1}
    # as bytes, as on a GPU (storage.cpu() copies a uint8 view): no hint to send it as bf16
    assert line.copy_dtypes == {"uint8": 512}
    loaded = torch.load(path, map_location="cpu")
    assert loaded["wte.weight"].shape == (16, 8) and loaded["wte.weight"].dtype == torch.float32
    # tied once loaded too, as a GPU's checkpoint loads
    assert loaded["wte.weight"].data_ptr() == loaded["lm_head.weight"].data_ptr()


@pytest.mark.parametrize("values", ["real", "placeholder"])
def test_torch_load_of_a_gpu_checkpoint_restores_onto_the_gpu_as_a_gpu_does(tmp_path, values):
    # NB: torch/serialization.py: with no map_location each storage goes back to the device
    # it was saved from (``_deserialize``: ``storage.to(device)``, one host->GPU copy of its
    # bytes); map_location (a device, a dict of locations, a function) moves it elsewhere.
    # pytorch/examples' word_language_model loads its best model so (``torch.load(f)``).
    path = tmp_path / "ckpt.pt"
    got: dict[str, object] = {}

    def work():
        model = TiedLM().to("cuda")
        torch.save(model, path)
        torch.save(model.state_dict(), tmp_path / "sd.pt")
        again = torch.load(path, weights_only=False)  # @whole
        sd = torch.load(tmp_path / "sd.pt")  # @sd
        on1 = torch.load(tmp_path / "sd.pt", map_location="cuda:1")  # @cuda1
        host = torch.load(tmp_path / "sd.pt", map_location="cpu")  # @cpu
        moved = torch.load(tmp_path / "sd.pt", map_location={"cuda:0": "cuda:1"})  # @dict
        kept = torch.load(tmp_path / "sd.pt", map_location=lambda s, loc: s)  # @fn
        again.lm_head(again.wte(torch.tensor([[1, 2]], device="cuda"))).sum().backward()
        got["whole"] = (again.wte.weight.device, again.wte.weight is again.lm_head.weight)
        got["grad"] = tuple(again.wte.weight.grad.shape)
        storages = {sd[k].untyped_storage()._cdata for k in ("wte.weight", "lm_head.weight")}
        got["tied"] = len(storages) == 1
        got["devices"] = [next(iter(d.values())).device.type for d in (sd, on1, host, moved, kept)]
        got["indices"] = [next(iter(d.values())).device.index for d in (sd, on1, moved)]
        if values == "real":
            got["equal"] = torch.equal(sd["wte.weight"].cpu(), model.wte.weight.detach().cpu())

    r, _ = profiled(work, devices=2, values=values)
    assert got["whole"] == (torch.device("cuda", 0), True) and got["grad"] == (16, 8)
    assert got["tied"] is True
    assert got["devices"] == ["cuda", "cuda", "cpu", "cuda", "cpu"]
    assert got["indices"] == [0, 1, 1]
    assert got.get("equal", True) is True
    # one storage (the tied weight, 16 x 8 float32) moved once per load that puts it on a GPU
    for marker in ("whole", "sd", "cuda1", "dict"):
        line = line_at(r, line_of(marker))
        assert line.h2d.counts() == copies(count=1, bytes=512, pageable=1), marker
        assert line.syncs.by_cause == {"copy_to_device": 1}, marker
    assert all(s.line not in (line_of("cpu"), line_of("fn")) for s in r.lines if s.h2d.count)
    # a checkpoint restored is a one-time move, as model.to: never "made on the CPU ... make
    # it on the GPU" (its bytes were made by an empty inside torch.load, no factory of ours)
    from gpuwatch.analysis.hints import hints

    for marker in ("whole", "sd"):
        assert set(line_at(r, line_of(marker)).origins) == {"parameter"}, marker
        assert [h.kind for h in hints(r) if h.line.line == line_of(marker)] == [], marker


def test_torch_save_of_views_copies_their_whole_storage_once_per_save(tmp_path):
    path = tmp_path / "views.pt"

    def work():
        t = torch.arange(10.0).to("cuda")  # one storage of 10 floats: 40 bytes
        torch.save({"head": t[:2], "tail": t[2:], "mid": t[4:6]}, path)  # @views
        torch.save(t[4:6], tmp_path / "slice.pt")  # @slice
        torch.save(t[4:6], tmp_path / "again.pt")  # @again
        torch.save([t, torch.zeros(3, device="cuda:1")], tmp_path / "two.pt")  # @two

    r, _ = profiled(work, devices=2, values="real")
    # three views at three offsets of one storage: one copy of all 40 bytes
    assert line_at(r, line_of("views")).d2h.counts() == copies(count=1, bytes=40, pageable=1)
    # a slice alone: the whole storage still (storage.cpu() copies all of it), each save anew
    for marker in ("slice", "again"):
        assert line_at(r, line_of(marker)).d2h.counts() == copies(count=1, bytes=40, pageable=1)
    # two storages on two GPUs: two copies, 40 + 12 bytes
    assert line_at(r, line_of("two")).d2h.counts() == copies(count=2, bytes=52, pageable=2)
    views = torch.load(path, map_location="cpu")
    assert views["head"].tolist() == [0.0, 1.0] and views["mid"].tolist() == [4.0, 5.0]
    assert views["tail"].tolist() == [float(i) for i in range(2, 10)]
    assert [v.storage_offset() for v in views.values()] == [0, 2, 4]
    assert len({v.untyped_storage().data_ptr() for v in views.values()}) == 1
    assert torch.load(tmp_path / "slice.pt", map_location="cpu").tolist() == [4.0, 5.0]


def test_memory_statistics_answer_from_the_fake_gpu():
    seen: dict[str, object] = {}

    def work():
        cuda = torch.cuda
        a = torch.empty(1000, device="cuda")  # 4000 bytes: one 4096-byte block
        b = torch.empty(10, device="cuda:1")  # 40 bytes: the 512-byte minimum block
        view = a[:10]  # no new memory
        c = a * 2
        seen["peak"] = cuda.max_memory_allocated()
        del c
        seen["after_del"] = (cuda.memory_allocated(), cuda.memory_allocated(1))
        cuda.reset_peak_memory_stats()
        seen["reset"] = cuda.max_memory_allocated()
        seen["reserved"] = cuda.memory_reserved()
        seen["stats"] = cuda.memory_stats()["allocated_bytes.all.current"]
        seen["info"] = cuda.mem_get_info()
        del a
        seen["view_holds"] = cuda.memory_allocated()
        del view, b
        seen["none"] = cuda.memory_allocated()
        cuda.empty_cache()
        seen["emptied"] = cuda.memory_reserved()
        seen["summary"] = "CUDA memory summary" in cuda.memory_summary()

    profiled(work, devices=2)
    total = 80 * 1024**3
    assert seen == {
        "peak": 2 * 4096,
        "after_del": (4096, 512),
        "reset": 4096,
        "reserved": 2 * 1024 * 1024,  # one 2 MiB segment
        "stats": 4096,
        "info": (total - 2 * 1024 * 1024, total),
        "view_holds": 4096,  # the view keeps the storage
        "none": 0,
        "emptied": 0,
        "summary": True,
    }


def test_rng_state_is_simulated_and_unsimulated_apis_say_so_in_one_line():
    def work():
        torch.manual_seed(1234)  # seeds every GPU, as on a GPU
        state = torch.cuda.get_rng_state()
        assert state.dtype == torch.uint8 and state.shape == (16,)
        assert torch.cuda.initial_seed() == 1234
        torch.cuda.manual_seed(7)
        assert torch.cuda.initial_seed() == 7
        torch.cuda.set_rng_state(state)
        assert torch.cuda.initial_seed() == 1234
        with torch.random.fork_rng(devices=[0]):
            torch.cuda.manual_seed(99)
        assert torch.cuda.initial_seed() == 1234
        torch.cuda.nvtx.range_push("step")
        with torch.cuda.nvtx.range("inner"):
            pass
        torch.cuda.nvtx.range_pop()
        torch.cuda.ipc_collect()
        with pytest.raises(AttributeError) as err:
            torch.cuda.memory_snapshot()
        assert str(err.value).startswith(
            "the fake GPU does not simulate torch.cuda.memory.memory_snapshot()"
        )
        assert "\n" not in str(err.value)

    profiled(work)
    assert "__getattr__" not in vars(torch._C)  # given back
