"""Budgets: the grammar every entry point shares, a saved run checked against one (exit 3,
naming each line over it and by how much), and pyproject.toml's [tool.gpuwatch.budget]."""

from __future__ import annotations

import pytest

from gpuwatch.cli import main as cli
from profilers import Budget, BudgetError, Copies, Line, Report, Syncs


def test_a_budget_reads_every_spelling_the_same_way():
    b = Budget.parse("syncs/step<=1, h2d.pageable=0 ;line:syncs.item<2\nCOMM.bytes <= 1e6")
    assert [str(t) for t in b.terms] == [
        "syncs/step<=1",
        "h2d.pageable<=0",
        "line:syncs.item<2",
        "comm.bytes<=1,000,000",
    ]
    t = b.terms[2]
    assert (t.measure, t.per_line, t.per_step, t.strict, t.limit) == (
        "syncs.item",
        True,
        False,
        True,
        2,
    )
    assert t.over(2) and not t.over(1.999)  # < is strict
    assert not b.terms[0].over(1.0) and b.terms[0].over(1.01)
    table = Budget.from_table({"syncs/step": 1, "line:d2h": 0}, "pyproject.toml")
    assert [str(t) for t in table.terms] == ["syncs/step<=1", "line:d2h<=0"]
    kw = Budget.from_kwargs(None, {"syncs_copy_to_host": 0, "h2d_non_blocking": 3}, "budget")
    assert [str(t) for t in kw.terms] == ["syncs.copy_to_host<=0", "h2d.non_blocking<=3"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sincs<=1", "unknown measure 'sincs' (did you mean 'syncs'?"),
        ("syncs>=1", "a budget is a ceiling; use <=, < or ="),
        ("syncs<=-1", "the limit must be a number of 0 or more, not -1"),
        ("syncs<=one", "the limit must be a number, not 'one'"),
        ("syncs<=nan", "the limit must be a number of 0 or more, not nan"),
        ("", "the budget is empty"),
        ("syncs<=1,,d2h=0", "an empty term"),
        ("syncs<=1,syncs<=2", "syncs is given twice"),
        ("rank:syncs<=1", "unknown scope 'rank'"),
        ("syncs", "cannot read 'syncs'; write MEASURE<=N"),
    ],
)
def test_a_malformed_budget_is_one_line_naming_what_is_wrong(text, says):
    with pytest.raises(BudgetError) as caught:
        Budget.parse(text)
    message = str(caught.value)
    assert says in message and "\n" not in message and message.startswith("--budget: ")


def _line(line: int, source: str, syncs: dict[str, int], h2d: Copies | None = None) -> Line:
    return Line(
        file="train.py",
        line=line,
        function="train",
        source=source,
        syncs=Syncs(sum(syncs.values()), syncs),
        h2d=h2d or Copies(),
    )


def _report(lines: list[Line], steps: int | None = 10) -> Report:
    base = Report(
        command=["train.py"], steps={"count": steps, "source": "optimizer"} if steps else None
    )
    return base.with_lines(lines)


@pytest.fixture
def saved(tmp_path, monkeypatch):
    """A saved run of 10 steps: line 12 syncs 20 times (2 a step), line 15 10 times, line 20
    copies 10 times from pageable memory (30 syncs in all: 3 a step)."""
    monkeypatch.chdir(tmp_path)
    report = _report(
        [
            _line(12, "loss.item()", {"item": 20}),
            _line(15, "if (x > 0).any():", {"item": 10}),
            _line(20, "xb = xb.to('cuda:0')", {}, Copies(10, 40960, 10, 0)),
        ]
    )
    report.save(tmp_path / "run.json")
    return tmp_path / "run.json"


def test_report_over_budget_exits_3_naming_each_line_and_by_how_much(saved, capsys):
    code = cli.main(
        ["report", str(saved), "--budget", "syncs/step<=1,h2d.pageable=0,line:syncs<=15"]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert err.splitlines() == [
        "gpuwatch: over budget (syncs/step<=1,h2d.pageable<=0,line:syncs<=15):",
        # 30 syncs / 10 steps = 3 a step, 2 over
        "  syncs/step<=1: 3 per step (2 over), from",
        "    2 per step  train.py:12 (train) loss.item()",
        "    1 per step  train.py:15 (train) if (x > 0).any():",
        "  h2d.pageable<=0: 10 (10 over), from",
        "    10  train.py:20 (train) xb = xb.to('cuda:0')",
        "  line:syncs<=15: 1 line over it",
        "    20 (5 over)  train.py:12 (train) loss.item()",
    ]


def test_report_within_budget_exits_0_and_says_so(saved, capsys):
    assert cli.main(["report", str(saved), "--budget", "syncs/step<=3,line:syncs<=20"]) == 0
    assert "gpuwatch: within budget (syncs/step<=3,line:syncs<=20)" in capsys.readouterr().err


def test_a_per_step_budget_on_a_run_with_no_step_fails_rather_than_passing(tmp_path, capsys):
    _report([_line(3, "x.item()", {"item": 1})], steps=None).save(tmp_path / "r.json")
    assert cli.main(["report", str(tmp_path / "r.json"), "--budget", "syncs/step<=5"]) == 3
    assert "syncs/step<=5: cannot be checked: the run ended no step" in capsys.readouterr().err


def test_pyproject_budget_is_found_upward_and_the_command_line_wins(saved, capsys):
    project = saved.parent
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.gpuwatch.budget]\n"syncs/step" = 2\n"line:h2d" = 10\n'
    )
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    import os

    os.chdir(sub)
    assert cli.main(["report", str(saved)]) == 3
    err = capsys.readouterr().err
    assert (
        f"gpuwatch: over budget (syncs/step<=2,line:h2d<=10, from {project / 'pyproject.toml'} "
        in err
    )
    assert "  syncs/step<=2: 3 per step (1 over), from" in err
    assert "line:h2d" not in err.split("from", 2)[2]  # 10 copies on one line: within its ceiling
    assert cli.main(["report", str(saved), "--budget", "syncs/step<=3"]) == 0  # replaces the table
    assert cli.main(["report", str(saved), "--no-budget"]) == 0
    capsys.readouterr()
    # a nearer pyproject.toml without the table is the project's: no budget
    (sub / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    assert cli.main(["report", str(saved)]) == 0
    assert "budget" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        (
            '[tool.gpuwatch.budget]\nsyncs = "one"\n',
            "'syncs' must be a number (a ceiling), not 'one'",
        ),
        ("[tool.gpuwatch.budget]\nsinks = 1\n", "unknown measure 'sinks'"),
        ("[tool.gpuwatch]\nbudget = 3\n", "must be a table of ceilings"),
        ("[tool.gpuwatch.budget\n", "is not valid TOML"),
    ],
)
def test_a_malformed_pyproject_budget_is_one_line_and_exit_2(saved, capsys, toml, says):
    (saved.parent / "pyproject.toml").write_text(toml)
    assert cli.main(["report", str(saved)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("gpuwatch: error: ") and err.count("\n") == 1


def test_profile_refuses_a_malformed_budget_before_running_the_script(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert cli.main(["profile", "--budget", "syncs/stp<=1", str(script)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gpuwatch: error: --budget: cannot read 'syncs/stp<=1'; write MEASURE<=N, "
        "e.g. syncs/step<=1\n"
    )
    assert not (tmp_path / "ran").exists()
    assert cli.main(["profile", "--budget", "syncs<=1", "--nproc-per-node", "2", str(script)]) == 2
    assert "gpuwatch report merged.json --budget SPEC" in capsys.readouterr().err
