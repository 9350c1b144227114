"""Where each step's time went, for the renderers: the verdict lines at the top of the summary,
each line's cost (which ranks the hints), the stacked bars of the HTML and the trace's slices.
Reads ``report.time`` (profilers/timing/verdict.py); a report without it renders as before."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from typing import Any, TypedDict

from gpuwatch import _format as fmt
from gpuwatch.analysis.findings import Findings
from gpuwatch.analysis.line_costs import cost_text, measured_gpu, predicted_gpu
from gpuwatch.output.whatif import prediction_lines, unprofiled_line
from profilers import Report
from profilers.sections import TimeView
from profilers.timing.timeline import OTHER_LINES
from profilers.timing.verdict import HOST_BOUND, per_step

CAUSE_NAMES = {
    "busy": "GPU busy",
    "input": "input wait",
    "sync": "sync wait",
    "copy": "copy wait",
    "comm": "collective wait",
    "launch": "host work (Python + launch)",
    "dependency": "waiting on other GPU work",
}


def _split(d: Mapping[str, Any]) -> str:
    """``input wait 92%, host work 8%``: the shares behind a verdict, largest first."""
    shares = sorted(d.get("shares_pct", {}).items(), key=lambda kv: kv[1], reverse=True)
    names = CAUSE_NAMES
    if d.get("verdict") == HOST_BOUND:  # nothing ran on a GPU: nothing was launched
        names = {**CAUSE_NAMES, "launch": "host work (Python + CPU ops)"}
    return ", ".join(f"{names.get(k, k)} {v:.0f}%" for k, v in shares if v >= 0.5)


def verdict_line(d: Mapping[str, Any], steps: int, after_first: bool = False) -> str:
    """``input-bound: 31.2 ms per step (input wait 92%, ...)``, over the host's time on a CPU;
    ``PREDICTED for H100-SXM: launch-bound: ...`` from a model of a GPU. ``after_first``: ``d``
    holds the ``steps`` after the first (:func:`~profilers.timing.verdict.per_step`)."""
    name = predicted_gpu(d)
    if name is not None:  # a typical step, replayed: per step already, every figure predicted
        return (
            f"PREDICTED for {name}: {d['verdict']}: {fmt.duration_ms(float(d['gpu']['wall_ms']))}"
            f" per step, {_split(d)} of the GPU's time (a model of the {name}, not measured)"
        )
    per = float(d["wall_unprofiled_ms"]) / max(1, steps)
    if measured_gpu(d):
        where = "of the GPU's time (measured with CUDA events)"
    else:
        where = "of the host's time (GPU not measured)"
    unit = "per step" if steps else "in all"
    if after_first:
        unit += (
            " over the step after the first"
            if steps == 1
            else f" over the {steps} steps after the first"
        )
    return f"{d['verdict']}: {fmt.duration_ms(per)} {unit}, {_split(d)} {where}"


def time_lines(r: Report, found: Findings) -> list[str]:
    """The summary's first lines: the verdict per step (or why there is none), step 0 where it
    held the setup, the profiler's own time taken out, and the line that cost most."""
    costs = found.line_costs
    t = r.time
    memory = r.predicted.memory if r.predicted else None
    fit = [f"PREDICTED: {memory.message}"] if memory and memory.message else []
    if not t:
        gpu = r.predicted.gpu if r.predicted else None
        if gpu is not None:  # --gpu NAME (the fake GPU's only), but no step ended to replay
            # NB: the memory check needs no step: the fake GPU counted the peak anyway
            return [
                f"where the time goes: not predicted for {gpu}: no step ended (the model "
                "replays steps: end each with optimizer.step() or profilers.step())",
                *fit,
            ]
        if r.options.fake_cuda:
            return [
                "where the time goes: not measured under --fake-cuda (the host's time there is "
                "mostly the simulated GPU's own work, which is not your script's); "
                "--gpu NAME predicts it for a named GPU"
            ]
        return []
    run = t["run"]
    basis, steps = per_step(t)
    after_first = basis is not run
    why_not = found.no_verdict
    if why_not is not None and r.counts_ops and not r.totals.ops:
        return [f"where the time goes: no verdict: {why_not}", *fit]
    out = [
        verdict_line(basis, steps, after_first)
        if why_not is None
        else f"where the time goes: no verdict: {why_not}",
        *prediction_lines(r),
        *graph_lines(r),
    ]
    out += [s for s in (first_step_line(t), unprofiled_line(r)) if s is not None]
    own = float(run["own_ms"])
    wall = float(run["wall_ms"])
    out.extend(fit)
    if measured_gpu(basis):
        gpu_steps = int(basis["gpu"].get("steps") or steps) if after_first else steps
        out.append(gpu_line(basis, gpu_steps, after_first))
    elif predicted_gpu(run) is None and wall > 0:
        text = (
            f"time measured on the host; the profiler's own {fmt.duration_ms(own)} "
            f"({100 * own / wall:.0f}% of {fmt.duration_ms(wall)}) is taken out of the figures"
        )
        # NB: what is left of it grows with it (observer_effect.py); judged on the steps the
        # figures are per (step 0's imports would hide a loop the profiler doubled)
        mine, of = float(basis.get("own_ms", own)), float(basis.get("wall_ms", wall))
        if mine >= 0.1 * of:
            most = "1.6x" if mine >= of - mine else "1.4x"
            text += (
                f", not all of it: {'per step it' if after_first else 'it'} was "
                f"{mine / max(of - mine, 1e-9):.1f}x the script's own "
                f"time, and on such runs the stated step has read up to {most} a plain run's "
                "(time the loop plainly where it matters)"
            )
        out.append(text)
    energy = energy_line(r)
    if energy is not None:
        out.append(energy)
    if costs:
        line, (ms, share) = next(iter(costs.items()))
        out.append(f"costliest line: {line}, {cost_text(r, ms, share)}")
    return out


def first_step_line(t: TimeView) -> str | None:
    """``step 0 took 1.33 s, 58x a step after it: ...``: the first step, which holds what ran
    before it (imports, building the model and optimizer), and the line that cost it most;
    left out of the per-step figures. None where it was not long (3x the median later step
    kept, and 50 ms longer, or more), or not measured."""
    first = t.get("first_step")
    basis, steps = per_step(t)
    if first is None or basis is t["run"] or not steps or predicted_gpu(basis) is not None:
        return None  # NB: predicted, the per-step figures are a typical step's already
    took = float(first["wall_unprofiled_ms"])
    kept = [float(s["wall_unprofiled_ms"]) for s in t.get("steps", []) if int(s["step"]) > 0]
    typical = median(kept) if len(kept) >= 2 else float(basis["wall_unprofiled_ms"]) / steps
    if typical <= 0 or took < 3 * typical or took - typical < 50.0:
        return None
    # NB: the median tells a long step 0 (a slow step later does not hide it); the ratio said
    # is to the per-step figure the verdict states (their mean), so the two lines agree, but
    # where a slow step swelled that mean past a third of step 0 (it said "0x"): the median's
    ratio, of = took / max(float(basis["wall_unprofiled_ms"]) / steps, 1e-9), "a step"
    if ratio < 3:
        ratio, of = took / typical, "the median step"
    text = (
        f"step 0 took {fmt.duration_ms(took)} (measured), {ratio:.0f}x {of} after it: it "
        "holds what ran before the first step (imports, building the model and the "
        "optimizer), left out of the per-step figures"
    )
    named = [d for d in first.get("lines") or [] if d["site"] != OTHER_LINES]
    if named and float(named[0]["total_ms"]) > 0:
        costliest = float(named[0]["total_ms"])
        text += (
            f"; its costliest line: {named[0]['site']} ({fmt.duration_ms(costliest)}, "
            f"{100 * costliest / took:.0f}%)"
        )
    return text


def gpu_line(run: Mapping[str, Any], steps: int, after_first: bool = False) -> str:
    """``GPU measured (CUDA events): busy 4.0 ms, idle 6.0 ms per step (sync wait 6.0 ms)``."""
    gpu = run["gpu"]
    n = max(1, steps)
    idle = sorted(gpu["idle_ms"].items(), key=lambda kv: kv[1], reverse=True)
    parts = ", ".join(
        f"{CAUSE_NAMES.get(k, k)} {fmt.duration_ms(float(v) / n)}" for k, v in idle if v > 0
    )
    unit = "per step" if steps else "in all"
    if after_first:
        unit += " after the first"
    text = (
        f"GPU measured (CUDA events): busy {fmt.duration_ms(float(gpu['busy_ms']) / n)}, idle "
        f"{fmt.duration_ms(float(gpu['idle_total_ms']) / n)} {unit}"
        + (f" ({parts})" if parts else "")
    )
    taken = float(run.get("gpu_profiler_ms", 0.0))
    if taken > 0:
        text += f"; the profiler's own {fmt.duration_ms(taken / n)} taken out of host work"
    return text


def energy_line(r: Report) -> str | None:
    """``energy: 41.2 J per step on GPU 0 (median of 60 steps, within 3.1 J), 2.5 kJ in all;
    idle: 12 J per step``, from NVML's energy counter; None where the run has no energy."""
    e = r.time.energy if r.time else None
    if not e:
        return None
    gpus = "GPU " + ", ".join(str(g) for g in _listed(e.get("gpus")))
    missing = e.get("not_measured")
    missing = missing if isinstance(missing, dict) else {}
    per = _number(e.get("step_j_median"))
    steps = r.time.steps if r.time else []
    if per is None and e.get("run_j") is None:
        why = next(iter(missing.values()), None) or next(
            (s["energy"].get("note") for s in steps if s.get("energy")), "not measured"
        )
        return f"energy: {why} ({gpus})"
    kept = [s["energy"] for s in steps if (s.get("energy") or {}).get("j") is not None]
    out = "energy:"
    if per is not None:
        within = max(float(k["uncertainty_j"]) for k in kept)
        out += f" {per:.3g} J per step on {gpus} (median of {len(kept)} steps, ±{within:.2g} J at most)"
    if (run_j := _number(e.get("run_j"))) is not None:
        out += f"{',' if per is not None else ''} {fmt.energy(run_j)} in all"
    update = _number(e.get("counter_update_ms"))
    moves = f", moving every {fmt.duration_ms(update)}" if update is not None else ""
    out += f" (NVML's energy counter{moves})"
    idle = _number(e.get("steps_idle_j"))
    if idle is not None:
        measured = sum(1 for k in kept if k.get("idle_j") is not None)
        out += f"; idle: {idle / max(1, measured):.3g} J per step"
    else:
        out += "; idle: not measured (GPU busy and idle not measured)"
    if kept and all(k.get("shorter_than_counter") for k in kept):
        out += (
            "; each step is shorter than the counter's update: its joules are the mean power "
            "around it times its length"
        )
    if missing:
        out += f"; GPU {', '.join(missing)}: no energy counter"
    return out


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class StepBar(TypedDict):
    step: int
    verdict: str
    ms: dict[str, float]


def step_bars(r: Report) -> list[StepBar]:
    """Per kept step: its number, verdict and ms by cause (busy first on a GPU)."""
    t = r.time
    if not t:
        return []
    out: list[StepBar] = []
    steps = t.get("steps", [])
    on_gpu = any(s.get("gpu") for s in steps)
    for s in steps:
        gpu = s.get("gpu")
        if on_gpu and not gpu:  # NB: its GPU half still to come: never a host bar among them
            continue
        parts = {"busy": gpu["busy_ms"], **gpu["idle_ms"]} if gpu else dict(s.get("host_ms", {}))
        out.append({"step": s["step"], "verdict": s["verdict"], "ms": parts})
    return out


#: Blocker lines the summary names before it says how many more there are.
GRAPH_LINES_SHOWN = 5


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def graph_lines(r: Report) -> list[str]:
    """Where the per-step verdict is launch-bound (the host's launches, not the GPU, set the
    pace), the lines that would stop capturing the step as a CUDA graph, costliest to capture
    first: a capture fails on a sync, a read back to the host or a pageable copy. The first
    line says what the list is; none where the step is not launch-bound or nothing blocks."""
    t = r.time
    if not t:
        return []
    basis, steps = per_step(t)
    blockers = basis.get("graph_blockers") or []
    if basis.get("verdict") != "launch-bound" or not blockers:
        return []
    over = f"over the {steps} steps after the first" if basis is not t["run"] else "in the run"
    out = [f"what stops capturing the step as a CUDA graph (one launch for its kernels), {over}:"]
    for b in blockers[:GRAPH_LINES_SHOWN]:
        parts = []
        if b["syncs"]:  # NB: a read to the host (.item(), .cpu()) is one of the syncs
            reads = f" ({b['host_reads']} of them reads to the host)" if b["host_reads"] else ""
            parts.append(_counted(b["syncs"], "sync", "syncs") + reads)
        if b["pageable"]:
            parts.append(_counted(b["pageable"], "pageable copy", "pageable copies"))
        out.append(f"  {b['site']}: {' and '.join(parts)}")
    if len(blockers) > GRAPH_LINES_SHOWN:
        more = len(blockers) - GRAPH_LINES_SHOWN
        out.append(f"  and {_counted(more, 'line more', 'lines more')} (the JSON's graph_blockers)")
    return out


def wait_slices(r: Report, pid: int, first_tid: int) -> list[dict[str, object]]:
    """Chrome-trace slices of the kept steps' waits, one track per cause and line (``input
    wait train.py:5``), from ``first_tid`` on; times are µs since the profile's start."""
    t = r.time
    if not t:
        return []
    tracks: dict[tuple[str, str], int] = {}
    events: list[dict[str, object]] = []
    for step in t.get("steps", []):
        for w in step.get("waits", []):
            key = (str(w["kind"]), str(w["site"]))
            tid = tracks.get(key)
            if tid is None:
                tid = tracks[key] = first_tid + len(tracks)
                events.append(track_name(pid, tid, f"{CAUSE_NAMES.get(key[0], key[0])} {key[1]}"))
            events.append(
                _slice(
                    pid,
                    tid,
                    w,
                    f"wait.{key[0]}",
                    f"{key[0]}{': ' + str(w['cause']) if w.get('cause') else ''}",
                    {"line": key[1], "step": step["step"], "measured": "host"},
                )
            )
    return events


COLORS = {
    "busy": "#2ca02c",
    "input": "#9467bd",
    "sync": "#ff7f0e",
    "copy": "#d62728",
    "comm": "#8c564b",
    "launch": "#1f77b4",
}


def time_charts(r: Report) -> dict[str, tuple[object, str]]:
    """The HTML's ``time`` chart: a stacked bar per kept step (ms by cause, the verdict in the
    hover), or the sentence that stands in for it."""
    bars = step_bars(r)
    if not bars:
        why = (
            "Where each step's time went was not measured (a --steps window, or time_steps=0)."
            if not r.time
            else "No step ended (no optimizer.step(), no profilers.step()): see the run's "
            "verdict above."
        )
        return {"time": (None, why)}
    import plotly.graph_objects as go

    apart = ""
    if r.time and first_step_line(r.time) is not None and len(bars) > 1 and bars[0]["step"] == 0:
        # NB: drawn, its setup would flatten every later step's bar to nothing
        took = float(r.time["first_step"]["wall_unprofiled_ms"])
        apart = f"; step 0 ({fmt.duration_ms(took)}, with the setup before it) left out"
        bars = bars[1:]
    fig = go.Figure()
    xs = [f"step {b['step']}" for b in bars]
    causes = [c for c in COLORS if any(float(b["ms"].get(c, 0.0)) > 0 for b in bars)]
    for cause in causes:
        fig.add_bar(
            name=CAUSE_NAMES[cause],
            x=xs,
            y=[b["ms"].get(cause, 0.0) for b in bars],
            marker_color=COLORS[cause],
            customdata=[b["verdict"] for b in bars],
            hovertemplate="%{x}: %{y:.2f} ms " + cause + " (%{customdata})<extra></extra>",
        )
    energy = {s["step"]: (s.get("energy") or {}).get("j") for s in (r.time.steps if r.time else [])}
    joules = [energy.get(b["step"]) for b in bars]
    if any(j is not None for j in joules):
        fig.add_scatter(
            name="energy (J)",
            x=xs,
            y=joules,
            yaxis="y2",
            mode="lines+markers",
            marker_color="#444",
            hovertemplate="%{x}: %{y:.3g} J (NVML's energy counter)<extra></extra>",
        )
        fig.update_layout(yaxis2={"title": "J", "overlaying": "y", "side": "right"})
    where = "GPU busy and idle by cause" if bars and "busy" in bars[0]["ms"] else "host time"
    name = predicted_gpu(r.time["run"]) if r.time else None
    how = f"PREDICTED for {name}" if name else "measured"
    if r.time and measured_gpu(r.time["run"]):
        how = "measured with CUDA events"
    fig.update_layout(
        barmode="stack",
        # NB: the detail on a second line: on one line it ran under plotly's toolbar
        title=f"Where each step's time went<br><sub>{where}, {how}; the profiler's own time "
        f"taken out{apart}</sub>",
        yaxis_title="ms",
        height=360,
        margin={"l": 10, "r": 10, "t": 60, "b": 40},
    )
    return {"time": (fig, "")}


def gpu_idle_slices(r: Report, pid: int, tid: int) -> list[dict[str, object]]:
    """Chrome-trace slices of the kept steps' measured GPU idle time, on one GPU track, each
    named by its cause and line (``sync wait train.py:9``); µs since the profile's start."""
    t = r.time
    steps = [s for s in (t.steps if t else []) if measured_gpu(s)]
    if not steps:
        return []
    events = [track_name(pid, tid, "GPU idle (measured, CUDA events)")]
    for step in steps:
        for sl in step["gpu"].get("idle_slices", []):
            cause = str(sl["cause"])
            why = f" ({sl['sync_cause']})" if sl.get("sync_cause") else ""
            events.append(
                _slice(
                    pid,
                    tid,
                    sl,
                    f"gpu_idle.{cause}",
                    f"{CAUSE_NAMES.get(cause, cause)}{why} {sl['site']}",
                    {"line": sl["site"], "step": step["step"], "measured": "measured"},
                )
            )
    return events


def track_name(pid: int, tid: int, name: str) -> dict[str, object]:
    """The Chrome-trace metadata event that names track ``tid``."""
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}


def _slice(
    pid: int, tid: int, span: Mapping[str, float], cat: str, name: str, args: dict[str, object]
) -> dict[str, object]:
    """One Chrome-trace slice of ``span`` (``start_ms`` since the profile's start, ``ms``)."""
    return {
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": round(float(span["start_ms"]) * 1000, 3),
        "dur": round(float(span["ms"]) * 1000, 3),
        "cat": cat,
        "name": name,
        "args": args,
    }
