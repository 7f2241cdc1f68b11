"""Chart axes that hold still: a page keeps each point's column until the newest passes the right
edge, a scale keeps its round bound until the data leaves it or shrinks well below it."""

from tui_app.core.axes import HEADROOM, SHRINK, Pager, Scale, round_up


def test_round_up_is_the_smallest_round_number_at_or_above():
    for value, want in [(0.9, 1.0), (1.0, 1.0), (1.01, 1.2), (37, 40), (105, 120), (4.7, 5.0), (0.031, 0.04), (8001, 10_000)]:
        assert abs(round_up(value) - want) < 1e-9 * want, (value, round_up(value))
    assert round_up(0) == 1.0 and round_up(float("nan")) == 1.0


def test_a_scale_holds_until_the_data_leaves_it_or_falls_well_below():
    s = Scale()
    hi = s.fit(37)
    assert hi == round_up(37 * HEADROOM) == 40
    assert [s.fit(v) for v in (20, 30, 38)] == [40, 40, 40], "within the bound: it stays"
    assert s.fit(39) == 50, "above it (with headroom): a new round bound"
    assert s.fit(50 * SHRINK * 0.9) == round_up(50 * SHRINK * 0.9 * HEADROOM), "far below: refitted"
    assert Scale(floor=100).fit(3) == 100 and Scale(floor=100).fit(0) == 100


def test_a_page_keeps_columns_and_jumps_half_a_width_at_the_edge():
    p = Pager()
    width = 10
    assert p.first(0, 3, width) == 0
    firsts = [p.first(0, newest, width) for newest in range(4, 10)]
    assert firsts == [0] * 6, "points keep their column while they fit"
    assert p.first(0, 10, width) == 5, "past the right edge: the newest in the middle"
    assert [p.first(0, n, width) for n in range(11, 15)] == [5] * 4
    assert p.first(12, 15, width) == 12, "a start no longer kept: the oldest kept"
    assert Pager().first(100, 250, width) == 241, "a first view: as many of the newest as fit"
