"""Prompt-lookup proposals and greedy acceptance on hand-made token lists: what each must return,
worked out by hand from their definitions, not from running them."""

import pytest

from tui_app.engine.speculative import accept_greedy, lookup_proposals


@pytest.mark.parametrize(
    "context,kwargs,expected",
    [
        # the last three tokens occurred before: what followed them there, up to the end
        ([1, 2, 3, 9, 1, 2, 3], {}, [9, 1, 2, 3]),
        # the latest earlier occurrence wins: 5 was followed by 7, then by 8
        ([5, 7, 5, 8, 5], {}, [8, 5]),
        # the longest n-gram wins over a later, shorter one: [1, 2] at 0 before [2] at 4
        ([1, 2, 9, 3, 2, 7, 1, 2], {}, [9, 3, 2, 7, 1, 2]),
        # at most num_tokens
        ([4, 10, 11, 12, 13, 14, 4], {"num_tokens": 3}, [10, 11, 12]),
        # max_ngram bounds the match: with 1, only the last token is looked for (latest: at 4)
        ([1, 2, 3, 8, 3, 6, 1, 2, 3], {"max_ngram": 1}, [6, 1, 2, 3]),
        # a repeat of one token proposes itself
        ([7, 7], {}, [7]),
        # nothing to match, or nothing before the tail
        ([1, 2, 3], {}, []),
        ([1], {}, []),
        ([], {}, []),
        # no room for proposals (the run's last token): none, however good the match
        ([1, 2, 1, 2], {"num_tokens": 0}, []),
    ],
)
def test_lookup_proposes_what_followed_the_latest_longest_match(context, kwargs, expected):
    assert lookup_proposals(context, **kwargs) == expected


@pytest.mark.parametrize(
    "proposals,choices,expected",
    [
        ([5, 6, 7], [5, 6, 7, 1], 3),  # all accepted; the target's fourth choice is the bonus token
        ([5, 6, 7], [5, 6, 8, 9], 2),  # the third differs: two kept
        ([5, 6, 7], [4, 6, 7, 1], 0),  # the first differs: none, even where later ones agree
        ([5], [5, 2], 1),
        ([], [3], 0),  # no proposals: the step gains the target's own token only
    ],
)
def test_greedy_acceptance_keeps_the_longest_agreeing_prefix(proposals, choices, expected):
    assert accept_greedy(proposals, choices) == expected
    # what the engine keeps: the accepted proposals and the target's token after them, which is
    # exactly the target's own greedy choices up to there
    assert [*proposals[:expected], choices[expected]] == choices[: expected + 1]
