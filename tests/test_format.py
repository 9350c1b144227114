from gpuwatch import _format as fmt
from gpuwatch.ui.widgets._style import bar, level_style


def test_sizes_use_binary_units():
    assert fmt.size(None) == "N/A"
    assert fmt.size(512) == "512 B"
    assert fmt.size(1536) == "1.5 KiB"
    assert fmt.size(80 * 1024**3) == "80.0 GiB"
    assert fmt.rate(3 * 1024**2) == "3.0 MiB/s"


def test_throughput_and_durations():
    assert fmt.throughput(4 * 1024**3, 2.0) == "2.0 GiB/s"  # binary units, as sizes are
    assert fmt.throughput(1, 0) == "N/A"
    assert fmt.duration_ms(0.25) == "250 µs"
    assert fmt.duration_ms(12.34) == "12.3 ms"
    assert fmt.duration_ms(2500) == "2.50 s"


def test_bar_fills_in_eighths_and_keeps_its_width():
    assert bar(50, 10).plain == "█████░░░░░"
    assert bar(5, 10).plain == "▌░░░░░░░░░"  # 5% of 80 eighths = 4 eighths, a half block
    assert bar(100, 4).plain == "████"
    assert bar(None, 4).plain == "····"
    for pct in range(0, 101, 7):
        assert len(bar(pct, 13).plain) == 13


def test_load_colours():
    assert level_style(10) == "green"
    assert level_style(79.9) == "yellow"
    assert level_style(80) == "red"
    assert level_style(None) == "dim"


def test_short_rates():
    assert fmt.rate_short(None) == "N/A"
    assert fmt.rate_short(660 * 1024**2) == "660MiB/s"
    assert fmt.rate_short(1.5 * 1024**3) == "1.5GiB/s"
    assert fmt.rate_short(100 * 1024) == "100KiB/s"
    assert fmt.rate_short(512) == "512B/s"


def test_a_figure_that_is_not_finite_says_so_and_none_stays_na():
    for value in (float("nan"), float("inf"), float("-inf")):
        shown = [fmt.size(value), fmt.rate(value), fmt.rate_short(value), fmt.pct(value),
                 fmt.num(value, " W"), fmt.throughput(10, value), fmt.duration_ms(value),
                 fmt.energy(value), fmt.span(value)]  # fmt: skip
        assert shown == ["not finite"] * len(shown)
    assert fmt.duration_ms(None) == fmt.span(None) == "N/A"
