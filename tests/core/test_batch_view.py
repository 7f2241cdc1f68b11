"""The KV pane's and the headless line's words for a batch of distinct prompts, against sums done here."""

from tests.helpers.synthetic import KV_PER_TOKEN as PER
from tests.helpers.synthetic import batch_step as step
from tui_app.core.batch_view import bar, packed, paged_tokens, summary


def test_the_headless_line_counts_arrivals_departures_and_the_queue():
    steps = [
        step("prefill", [[0, 10, 1, 8], [1, 6, 1, 4]], 0, 2, 100),
        step("decode", [[0, 10, 2, 8], [3, 6, 2, 4], [4, 12, 1, 8]], 2, 4, 200),  # #1 and #2 came and went
    ]
    text = summary(steps, 4)
    # 6 arrived: #4 the last in the batch, two more queued; 2 done: #1 and #2
    assert text.startswith(
        "batch of distinct prompts, 4 at a time: 6 arrived, 2 done, 2 waiting; over its last 1 decode step 20.0 tok/s, the first sequence 5.0;"
    )
    # 11 + 7 + 12 own tokens in 3 rows × 12 slots; in 16-token blocks, a block a row: more than padded, at lengths this short
    assert text.endswith(f"KV {36 * PER / 2**20:.1f} MiB held, 17% padding; paged: {48 * PER / 2**20:.1f} MiB")


def test_bars_cells_and_blocks():
    assert bar(3, 8) == "███░░░░░" and bar(9, 8) == "████████" and bar(0, 0) == "░" * 8
    assert packed(["aaaa", "bbbb", "cccc"], 10) == ["aaaa  bbbb", "cccc"] and packed(["a" * 12], 10) == ["a" * 12]
    assert paged_tokens([[0, 16, 1, 8], [1, 16, 2, 8]]) == 16 + 32  # 16 tokens fill a block; 17 take two
