"""benchmarks/common/tmux.py: what the benchmarks and the terminal tests read off the real app's screen."""

from benchmarks.common.tmux import runs_finished


def test_finished_runs_are_counted_by_their_number_not_by_one_status():
    """A small model's runs take a tenth of a second: the poll must not wait for one exact status."""
    assert runs_finished("│ 358  cache  43 │\n run 4 done (length) · auto   ? help") == 4
    assert runs_finished("run 361: generating") == 360
    assert runs_finished("loading the model… run 12 shown in no status") == 0
