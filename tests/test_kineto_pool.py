"""``gpuwatch report RANK_FOLDER`` reads each rank file on its own (in this process, in a pool of
processes with ``--jobs N``, or on a Dask cluster with ``--scheduler``) and gives the same report,
notes and one-line errors as one read of all the files together."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest

from gpuwatch.cli import main as cli
from gpuwatch.output import kineto_pool
from profilers.kineto.analyse import analyse
from profilers.kineto.read import NoGpuActivity, TraceError, read_traces
from tests.kineto_helpers import TraceBuilder
from tests.shared_traces import SHARED_TRACES, needs_shared_traces


def _rank(path: Path, rank: int | None, busy_us: float = 40, gpu: bool = True) -> Path:
    t = TraceBuilder(rank=rank)
    t.step(1, 0, 100)
    t.loader(0, 20)
    if gpu:
        t.launch("aten::mm", 21, 30, busy_us)
    return t.write(path, gz=path.name.endswith(".gz"))


def _folder(tmp_path: Path, name: str = "run") -> Path:
    """Four ranks named out of rank order, a report written beside them, a CPU-only helper."""
    folder = tmp_path / name
    folder.mkdir()
    for rank, name in ((2, "a.json"), (0, "b.json.gz"), (3, "c.json"), (1, "d.json")):
        _rank(folder / name, rank, busy_us=10 + 10 * rank)
    (folder / "analysis.json").write_text('{"schema": "gpuwatch.trace/1"}')
    _rank(folder / "helper.json", None, gpu=False)
    return folder


def _layouts(tmp_path: Path) -> dict[str, list[str]]:
    loose = [_rank(tmp_path / f"r{i}.json", None, busy_us=5 * i + 5) for i in range(3)]
    return {
        "folder": [str(_folder(tmp_path))],
        "files without ranks": [str(p) for p in loose],
        "folder and file": [str(_folder(tmp_path, "run2")), str(_rank(tmp_path / "r9.json", 9))],
    }


def test_a_rank_analysis_and_a_rank_error_pickle(tmp_path):
    result = kineto_pool.read_rank(str(_rank(tmp_path / "t.json", 1)))
    assert pickle.loads(pickle.dumps(result)) == result and result.timeline  # type: ignore[union-attr]
    error = kineto_pool.read_rank(str(_rank(tmp_path / "cpu.json", 0, gpu=False)))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is NoGpuActivity and str(back) == str(error) and "CPU-only" in str(back)


@pytest.mark.parametrize("layout", ["folder", "files without ranks", "folder and file"])
def test_ranks_read_one_by_one_give_the_one_read_report(tmp_path, layout):
    paths = _layouts(tmp_path)[layout]
    one_read = analyse(read_traces(paths), paths).to_dict()
    assert kineto_pool.read_ranks(paths, jobs=1).to_dict() == one_read
    if layout == "folder":
        assert [r["rank"] for r in one_read["ranks"]] == [0, 1, 2, 3]
        assert one_read["ranks"][0]["notes"][:2] == [
            "passed over (JSON, not a Chrome trace): analysis.json",
            "passed over (no GPU activity in the trace): helper.json",
        ]


@pytest.mark.parametrize("bad", ["cpu", "garbage", "empty folder", "only a report"])
def test_a_bad_rank_gives_the_one_read_error(tmp_path, bad):
    folder = tmp_path / "in"
    folder.mkdir()
    good = str(_rank(tmp_path / "good.json", 0))
    if bad == "cpu":
        path = str(_rank(tmp_path / "cpu.json", 1, gpu=False))
    elif bad == "garbage":
        (tmp_path / "bad.json").write_text("[{")
        path = str(tmp_path / "bad.json")
    else:
        if bad == "only a report":
            (folder / "r.json").write_text("{}")
        path = str(folder)
    with pytest.raises(TraceError) as one_read:
        read_traces([good, path])
    with pytest.raises(TraceError) as by_rank:
        kineto_pool.read_ranks([good, path], jobs=1)
    assert type(by_rank.value) is type(one_read.value)
    assert str(by_rank.value) == str(one_read.value)


def test_a_worker_without_the_file_says_the_filesystem_is_not_shared(tmp_path):
    said = str(kineto_pool.read_on_worker("rank0.json", str(tmp_path)))
    assert said.startswith("rank0.json is not on the Dask worker ")
    assert f"({tmp_path / 'rank0.json'}: a filesystem they share" in said


def test_the_progress_bar_shows_on_a_terminal_only_and_never_quiet(tmp_path, capsys, monkeypatch):
    folder = _folder(tmp_path)
    monkeypatch.setattr(kineto_pool, "SHOW_AFTER_S", 0.0)  # every read "takes" over a second
    assert cli.main(["report", "-q", str(folder)]) == 0
    assert capsys.readouterr().err == ""  # not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli.main(["report", "-q", str(folder)]) == 0
    assert capsys.readouterr().err == ""  # -q
    assert cli.main(["report", str(folder)]) == 0
    assert "ranks read" in capsys.readouterr().err


def test_without_distributed_the_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    path = str(_rank(tmp_path / "t.json", 0))
    assert cli.main(["report", "--scheduler", "tcp://127.0.0.1:8786", path]) == 2
    assert capsys.readouterr().err == (
        "gpuwatch: error: --scheduler needs Dask's distributed: pip install 'gpuwatch[dask]'\n"
    )


def _json(tmp_path: Path, name: str, args: list[str]) -> object:
    out = tmp_path / f"{name}.json"
    assert cli.main(["report", "-q", "--json", str(out), *args]) == 0
    return json.loads(out.read_text())


def _cases(tmp_path: Path) -> list[list[str]]:
    cases = [_layouts(tmp_path)["folder"]]
    if SHARED_TRACES.is_dir():
        cases.append([str(SHARED_TRACES / "two_ranks")])
    return cases


@pytest.mark.slow
@needs_shared_traces
def test_two_processes_give_the_figures_of_one(tmp_path):
    for i, paths in enumerate(_cases(tmp_path)):
        one = _json(tmp_path, f"one{i}", ["--jobs", "1", *paths])
        assert _json(tmp_path, f"two{i}", ["--jobs", "2", *paths]) == one
        assert _json(tmp_path, f"default{i}", paths) == one


@pytest.mark.slow
def test_a_dask_cluster_gives_the_figures_of_one_process(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed")
    cases = [*_cases(tmp_path), ["run"]]  # a path from our working folder, not the workers'
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        monkeypatch.chdir(tmp_path)
        for i, paths in enumerate(cases):
            one = _json(tmp_path, f"one{i}", ["--jobs", "1", *paths])
            on_dask = ["--scheduler", cluster.scheduler_address, *paths]
            assert _json(tmp_path, f"dask{i}", on_dask) == one


@pytest.mark.slow
def test_an_unreachable_scheduler_is_one_line_after_the_timeout(tmp_path, capsys):
    dask = pytest.importorskip("dask", reason="Dask's distributed is not installed")
    pytest.importorskip("distributed", reason="Dask's distributed is not installed")
    path = str(_rank(tmp_path / "t.json", 0))
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        assert cli.main(["report", "--scheduler", "tcp://127.0.0.1:9", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch: error: cannot reach the Dask scheduler tcp://127.0.0.1:9: ")
    assert err.count("\n") == 1 and "after 1 s" in err
