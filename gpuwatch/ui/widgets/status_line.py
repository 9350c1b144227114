"""The live view's bottom line: the run's state, elapsed time, pid and how much it has counted."""

from __future__ import annotations

from textual.widgets import Static

from gpuwatch.output.timeview import verdict_line
from gpuwatch.profile.live.protocol import LiveSnapshot


def status_text(
    state: str,
    elapsed_s: float,
    pid: int | None,
    snapshot: LiveSnapshot | None,
    energy: tuple[int, float, bool] | None = None,
) -> str:
    """``running · 01:05 · pid 4242 · 30,554 ops, 11 lines · step 12 ... · step 11: 41.2 J``
    (``energy``: the newest step the GPU samples cover, J, and whether it is shorter than
    their gap: ``≈``, the mean power around it times its length)."""
    parts = [state, f"{int(elapsed_s // 60):02d}:{int(elapsed_s % 60):02d}", f"pid {pid}"]
    if snapshot is not None:
        ops = f"{snapshot.totals['ops']:,} ops, " if snapshot.counting == "every_op" else ""
        parts.append(f"{ops}{snapshot.line_count} lines")
        if snapshot.time:  # where the last step's time went
            parts.append(f"step {snapshot.time['step']} {verdict_line(snapshot.time, 1)}")
    if energy is not None:
        step, joules, short = energy
        parts.append(f"step {step}: {'≈' if short else ''}{joules:.3g} J")
    return " · ".join(parts)


class StatusLine(Static):
    """One line, repainted only when its text changes (a modal above repaints with it); its
    class says how the run ended (``-ended`` for exit code 0, ``-failed`` otherwise)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._text = ""

    def show(
        self,
        state: str,
        elapsed_s: float,
        pid: int | None,
        snapshot: LiveSnapshot | None,
        exit_code: int | None,
        energy: tuple[int, float, bool] | None = None,
    ) -> None:
        """``elapsed_s``: the run's, which stops when the run does (``LiveRun.elapsed_s``)."""
        text = status_text(state, elapsed_s, pid, snapshot, energy)
        if text != self._text:
            self._text = text
            self.update(text)
        self.set_class(exit_code == 0, "-ended")
        self.set_class(exit_code is not None and exit_code != 0, "-failed")
