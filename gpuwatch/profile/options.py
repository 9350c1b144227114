"""Every option of ``gpuwatch profile``, declared once: :class:`ProfileOptions`.

Each field carries its command-line declaration (spellings, value type, help, whether the
notebook magic takes it). From them come the argparse arguments (:func:`add_arguments`), the
options of a parsed command line (:meth:`ProfileOptions.from_namespace`), the command line that
gives them back (:meth:`ProfileOptions.to_argv`: the ranks of ``--nproc-per-node``), the JSON the
``--live`` child receives (:meth:`ProfileOptions.to_json` / :meth:`ProfileOptions.from_json`,
equal and hashable on the way back), and the keywords of ``profilers.profile()``
(:func:`profiler_keywords`, the one place the CLI's words become the library's).

The target (the script or ``-m module`` and its arguments) is not an option: it is
``runner.Target``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuwatch.argvalues import bounded_int, checkpoint_seconds, interval, step_window
from gpuwatch.flags import PROFILE_OUTPUTS, Flag, declare, frozen, jsonable
from gpuwatch.flags import flag_field as _flag
from gpuwatch.profile.budget import BUDGET_HELP
from gpuwatch.profile.sizes import fake_values, memory_size

if TYPE_CHECKING:
    from profilers import Profile
    from profilers.fake_cuda.harness import FakeCuda

#: Copy/sync events a timeline may keep: 10 million is about 1 GB of JSON.
MAX_TIMELINE_CAPACITY = 10_000_000
#: Seconds between the partial reports that stand in for the final one if the process is killed.
CHECKPOINT_S = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileOptions:
    """How to profile and what to write: every ``gpuwatch profile`` option, built the same way
    by the CLI, the ``--live`` child, the ranks of ``--nproc-per-node`` and the notebook magic.

    Defaults are the command line's; tuples, never lists, so that options hash and compare."""

    output_paths: tuple[str, ...] = PROFILE_OUTPUTS.field("output_paths")
    json_path: str | None = PROFILE_OUTPUTS.field("json_path")
    html_path: str | None = PROFILE_OUTPUTS.field("html_path")
    trace_path: str | None = PROFILE_OUTPUTS.field("trace_path")
    quiet: bool = PROFILE_OUTPUTS.field("quiet")
    top: int = PROFILE_OUTPUTS.field("top")
    kernel_timing: bool = _flag(
        True,
        Flag(
            ("--no-kernel-timing",),
            "count copies, syncs and collectives only: no kernel time, no op counts; only the "
            "ops that copy, sync or communicate reach Python (several times cheaper per op)",
            "false",
            magic=True,
        ),
    )
    count_ops: bool = _flag(
        False,
        Flag(
            ("--count-ops",),
            "with --no-kernel-timing: still count every op per line (every op enters Python); "
            "kernel timing counts them already",
            "true",
            magic=True,
        ),
    )
    user_code: tuple[str, ...] = _flag(
        (),
        Flag(
            ("--user-code",),
            "only files under DIR count as your code (repeatable)",
            store="append",
            metavar="DIR",
            magic=True,
        ),
    )
    inputs: tuple[str, ...] = _flag(
        (),
        Flag(
            ("--input",),
            "time this iterator as input, like a DataLoader (repeatable): a class by dotted "
            "name (its __next__, or its __iter__'s iterators) or a (generator) function (its "
            "results); in the script itself, wrap it with profilers.input()",
            store="append",
            metavar="MODULE.NAME",
            magic=True,
        ),
    )
    lib_lines: bool = _flag(
        False,
        Flag(
            ("--lib-lines",),
            "charge each copy and sync a library made (HF Trainer, Lightning, GradScaler) to "
            "the library's line, your lines as its callers, not to your line that called it",
            "true",
            magic=True,
        ),
    )
    timeline_capacity: int = _flag(
        10_000,
        Flag(
            ("--timeline-capacity",),
            "copy/sync events kept for the timeline (default 10000, newest kept; at most 10000000)",
            parse=bounded_int(0, MAX_TIMELINE_CAPACITY),
            metavar="N",
            magic=True,
        ),
    )
    checkpoint_s: float = _flag(
        CHECKPOINT_S,
        Flag(
            ("--checkpoint",),
            "with a JSON report: rewrite it every SECONDS while the script runs, so a "
            "SIGKILLed run (the OOM killer) still leaves a partial report (default 30; 0 turns "
            "it off)",
            parse=checkpoint_seconds,
            metavar="SECONDS",
        ),
    )
    gpu_interval_s: float = _flag(
        0.5,
        Flag(
            ("-i", "--interval"),
            "seconds between GPU stats samples for the timeline (default 0.5, at least 0.1)",
            parse=interval,
            metavar="SECONDS",
            old=("--gpu-interval",),
        ),
    )
    gpu_stats: bool = _flag(
        True, Flag(("--no-gpu-stats",), "do not sample GPU stats with NVML", "false")
    )
    trace_syncs: bool = _flag(
        False,
        Flag(
            ("--trace-syncs",),
            "take syncs from PyTorch's GPU trace: also those inside ops no rule "
            "explains, at a cost on every CUDA event",
            "true",
            magic=True,
        ),
    )
    fake_cuda: bool = _flag(
        False,
        Flag(
            ("--fake-cuda",),
            "no GPU needed: run the script against simulated GPUs and count the copies and "
            "syncs it would make on real ones (their values computed on the CPU: --fake-values); "
            "no kernel time is measured",
            "true",
            magic=True,
        ),
    )
    fake_gpus: int = _flag(
        1,
        Flag(
            ("--fake-gpus",),
            "with --fake-cuda: how many GPUs the machine has (default 1, at most 8)",
            parse=bounded_int(1, 8),
            metavar="N",
            magic=True,
        ),
    )
    fake_values: str | None = _flag(
        None,
        Flag(
            ("--fake-values",),
            "with --fake-cuda: what the simulated GPUs' tensors hold: real values computed on "
            "the CPU, so every value read back and every branch on one is a GPU's (default), or "
            "placeholders (no memory, no compute: for models too big for this machine)",
            parse=fake_values,
            metavar="{real,placeholder}",
            magic=True,
        ),
    )
    fake_memory_bytes: int | None = _flag(
        None,
        Flag(
            ("--fake-memory",),
            "with --fake-cuda: each GPU's memory, e.g. 24GiB (default 80GiB); a script that "
            "needs more stops with CUDA's out-of-memory error, the lines holding the memory named",
            parse=memory_size,
            metavar="SIZE",
            magic=True,
        ),
    )
    memory: bool = _flag(
        False,
        Flag(
            ("--memory",),
            "which line made each tensor, and the GPU memory each line holds at the peak "
            "(every op enters Python; always on with --fake-cuda)",
            "true",
            magic=True,
        ),
    )
    gpu: str | None = _flag(
        None,
        Flag(
            ("--gpu",),
            "with --fake-cuda: predict the run on the GPU NAME (H100, A100, L4, T4, ...): "
            "GPU busy and idle time, verdicts and what-ifs from a model of it, marked PREDICTED, "
            "each with its range (the host's part measured on this CPU, the model's error)",
            metavar="NAME",
        ),
    )
    what_if: bool = _flag(
        False,
        Flag(
            ("--what-if",),
            "after the summary, print what each fix would save per step (replayed from the "
            "recorded steps: with --fake-cuda --gpu, or on a GPU with kernel timing)",
            "true",
        ),
    )
    steps: tuple[int, int | None] | None = _flag(
        None,
        Flag(
            ("--steps",),
            "profile steps A to B-1 only (0-based; A: to the end), a step ended by each "
            "optimizer.step() or profilers.step(); outside them the script runs at full speed",
            parse=step_window,
            metavar="A:B",
            magic=True,
            show=lambda steps: f"{steps[0]}:{'' if steps[1] is None else steps[1]}",
        ),
    )
    nproc_per_node: int = _flag(
        0,
        Flag(
            ("--nproc-per-node",),
            "launch N ranks with PyTorch's launcher (torch.distributed.run), profile each, and "
            "merge their reports into the paths given (one summary for all ranks)",
            parse=bounded_int(1, 1024),
            metavar="N",
        ),
    )
    live: bool = _flag(
        False,
        Flag(
            ("--live",),
            "watch it live: GPU stats, copies, syncs and hot lines while it runs "
            "(the script runs in a child process)",
            "true",
        ),
    )
    demo: bool = _flag(
        False, Flag(("--demo",), "with --live: simulated GPU cards (no NVML needed)", "true")
    )
    budget: str | None = _flag(None, Flag(("--budget",), BUDGET_HELP, metavar="SPEC"))
    no_budget: bool = _flag(
        False, Flag(("--no-budget",), "ignore [tool.gpuwatch.budget] in pyproject", "true")
    )

    @property
    def simulated_gpus(self) -> int:
        """GPUs to simulate (``--fake-cuda``); 0: the real ones."""
        return self.fake_gpus if self.fake_cuda else 0

    @property
    def untimed(self) -> bool:
        """Kernel time is not measured (``--no-kernel-timing``, or simulated GPUs)."""
        return not self.kernel_timing or self.fake_cuda

    def fake_gpus_harness(self) -> FakeCuda | None:
        """The simulated GPUs these options ask for (``--fake-cuda``); None: the real ones."""
        if not self.simulated_gpus:
            return None
        from profilers.fake_cuda.harness import FakeCuda

        return FakeCuda(
            self.simulated_gpus, memory_bytes=self.fake_memory_bytes, values=self.fake_values
        )

    def profiler(self) -> Profile:
        """The ``profilers.profile()`` these options ask for."""
        import profilers

        return profilers.profile(**profiler_keywords(self))

    def replace(self, **changes: Any) -> ProfileOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> ProfileOptions:
        """The options of a command line parsed by :func:`add_arguments`'s arguments (fields
        the parser did not declare keep their defaults)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not hasattr(ns, f.name):
                continue
            value = getattr(ns, f.name)
            if f.metadata["flag"].store == "append":
                value = tuple(value or ())
            values[f.name] = value
        return cls(**values)

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ProfileOptions:
        """The options of a command line of options only (no script)."""
        parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
        add_arguments(parser)
        return cls.from_namespace(parser.parse_args(list(argv)))

    def to_argv(self) -> list[str]:
        """The command line that gives these options back, in each option's current spelling;
        options at their default are left out."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value, flag = getattr(self, f.name), f.metadata["flag"]
            if value == f.default:
                continue
            name = flag.names[-1]
            if flag.store in ("true", "false"):
                argv.append(name)
            elif flag.store == "append":
                for item in value:
                    argv += [name, flag.show(item)]
            else:
                argv += [name, flag.show(value)]
        return argv

    def to_json(self) -> dict[str, object]:
        """The options as JSON values (tuples become lists): :meth:`from_json` undoes it."""
        return {f.name: jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProfileOptions:
        """The options :meth:`to_json` wrote, equal to them (lists become tuples again)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"not profile options: {', '.join(unknown)}")
        return cls(**{name: frozen(value) for name, value in data.items()})


def profiler_keywords(options: ProfileOptions) -> dict[str, Any]:
    """The keywords of ``profilers.profile()`` these options ask for: the one place the CLI's
    options become the library's (every entry point profiles through it)."""
    return {
        # NB: ops on fake GPU tensors compute nothing: their time is no kernel's time.
        "kernel_timing": options.kernel_timing and not options.fake_cuda,
        # The library's count_ops is three-state: None lets it decide (every op when timing,
        # the fast path otherwise). The fake GPU runs every op through a dispatch mode of its
        # own: counting every op costs little more there, and its reports keep their op counts.
        "count_ops": True if options.count_ops or options.fake_cuda else None,
        "user_code": options.user_code or None,
        "timeline_capacity": options.timeline_capacity,
        "trace_syncs": options.trace_syncs,
        "steps": options.steps,
        "memory": True if options.memory else None,
        "gpu": options.gpu,
        "inputs": options.inputs,
        "lib_lines": options.lib_lines,
        # NB: the replay's record of every op costs the hot path: kept only when asked for
        "what_if": options.what_if,
    }


def add_arguments(parser: argparse.ArgumentParser, magic: bool = False) -> None:
    """Declares every option on ``parser`` (``magic``: only those the notebook magic takes),
    each under its field's name."""
    declare(parser, ProfileOptions, magic)
