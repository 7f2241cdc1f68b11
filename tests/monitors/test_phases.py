"""The phase splitter (monitors/phases.py): the same phases however a stream's text is cut into
pieces, every character kept, each source's markers, and the bad input the parsers meet."""

from __future__ import annotations

import pytest

from monitors.phases import ANSWER, THINKING, TOOL, PhasedStream, PhaseSplit, share


def by_char(pieces) -> list[str]:
    """The phase of each character of the stream, the pieces' texts joined."""
    return [p.phase for p in pieces for _ in p.text]


def run(cuts: list[str], **split) -> tuple[list, PhasedStream]:
    """The cuts pushed in turn, a token a character (so a piece spanning phases has a token for each)."""
    stream = PhasedStream(PhaseSplit(**split))
    pieces = []
    for i, text in enumerate(cuts):
        pieces += stream.push([(None, text)], len(text), i)
    return pieces + stream.close(), stream


def cut_everywhere(text: str) -> list[list[str]]:
    """Whole, a character a piece, and in two at every place."""
    return [[text], list(text)] + [[text[:k], text[k:]] for k in range(1, len(text))]


# Each stream as its spans, (phase, text): the stream is their texts joined.
STREAMS = {
    "think then answer": [(THINKING, "\n<think>\nsky is blue</think>"), (ANSWER, "\n\nBlue.")],
    "a think in the answer's code is answer": [(ANSWER, "Use `<think>` tags.")],
    "a close with no opening": [(ANSWER, "done</think>Yes")],
    "a tool call in the answer": [(ANSWER, "Ok "), (TOOL, '<tool_call>{"f":1}</tool_call>'), (ANSWER, " fine")],
    "harmony": [
        (THINKING, "<|channel|>analysis<|message|>hmm<|end|>"),
        (ANSWER, "<|start|>assistant<|channel|>final<|message|>Hi<|return|>"),
    ],
    "harmony tool call": [(TOOL, "<|channel|>commentary to=functions.f <|message|>{}<|call|>")],
}


@pytest.mark.parametrize("name", STREAMS)
def test_every_cut_of_a_stream_gives_each_character_the_same_phase(name):
    text = "".join(t for _, t in STREAMS[name])
    phases = [phase for phase, t in STREAMS[name] for _ in t]
    for cuts in cut_everywhere(text):
        pieces, _ = run(cuts)
        assert "".join(p.text for p in pieces) == text  # nothing dropped, nothing moved
        assert by_char(pieces) == phases, cuts
        assert sum(p.n for p in pieces) == len(text)  # every token comes out


def test_a_piece_waits_while_it_may_begin_a_marker_and_keeps_its_own_stamp():
    stream = PhasedStream()
    assert stream.push([(None, "<")], 1, "t0") == []
    assert stream.push([(None, "th")], 1, "t1") == []
    got = stream.push([(None, "ink>Hm")], 1, "t2")
    assert [(p.text, p.phase, p.payload) for p in got] == [("<", THINKING, "t0"), ("th", THINKING, "t1"), ("ink>Hm", THINKING, "t2")]
    assert stream.push([(None, "</th")], 1, "t3") == []
    got = stream.push([(None, "en")], 1, "t4")  # not a marker once it goes on: then it goes out
    assert [(p.text, p.phase, p.payload) for p in got] == [("</th", THINKING, "t3"), ("en", THINKING, "t4")]


def test_leading_whitespace_waits_for_whether_a_think_span_opens():
    pieces, _ = run(["\n\n", "Hello"])
    assert [(p.text, p.phase, p.payload) for p in pieces] == [("\n\n", ANSWER, 0), ("Hello", ANSWER, 1)]


def test_a_span_never_closed_ends_as_thinking():
    pieces, stream = run(["<think>", "still <", "/thi"])
    assert {p.phase for p in pieces} == {THINKING} and "".join(p.text for p in pieces) == "<think>still </thi"
    assert stream.split.phase == THINKING


def test_atomic_markers_let_nothing_wait():
    stream = PhasedStream(PhaseSplit(atomic=True))
    got = [stream.push([(None, t)], 1, i) for i, t in enumerate([" ", "<think>", "a <", "</think>", "b"])]
    assert [[(p.text, p.phase) for p in g] for g in got] == [
        [(" ", ANSWER)],
        [("<think>", THINKING)],
        [("a <", THINKING)],
        [("</think>", THINKING)],
        [("b", ANSWER)],
    ]


def test_a_close_with_no_opening_is_counted_and_left_as_answer_text():
    pieces, stream = run(["Yes</think>", " no"])
    assert {p.phase for p in pieces} == {ANSWER} and stream.split.stray == 1


def test_a_template_that_opens_the_span_starts_in_thinking():
    pieces, stream = run(["plan", "</think>", "Do it"], thinking=True)
    assert [(p.text, p.phase) for p in pieces] == [("plan", THINKING), ("</think>", THINKING), ("Do it", ANSWER)]
    assert stream.split.stray == 0


def test_server_fields_decide_their_phase_and_text_waiting_goes_first():
    stream = PhasedStream()
    assert stream.push([(None, " ")], 1, 0) == []  # waits: a span may open
    got = stream.push([(THINKING, "why"), (None, "Because")], 2, 1)
    assert [(p.text, p.n, p.phase, p.payload) for p in got] == [(" ", 1, ANSWER, 0), ("why", 1, THINKING, 1), ("Because", 1, ANSWER, 1)]
    got = stream.push([(TOOL, 'get_weather {"city":')], 1, 2)
    assert [(p.phase, p.payload) for p in got] == [(TOOL, 2)]


def test_a_pieces_tokens_are_shared_by_length_and_the_later_phase_wins_a_lone_token():
    assert [(p.text, p.n, p.phase) for p in share([(THINKING, "abcdefgh</think>"), (ANSWER, "Hi")], 6)] == [
        ("abcdefgh</think>", 4, THINKING),
        ("Hi", 2, ANSWER),
    ]
    assert [(p.text, p.n, p.phase) for p in share([(THINKING, "x</think>"), (ANSWER, "Hi")], 1)] == [("x</think>Hi", 1, ANSWER)]
    assert [(p.text, p.n) for p in share([(ANSWER, "a"), (ANSWER, "b")], 3)] == [("ab", 3)]


def test_the_think_span_is_found_by_its_phase_not_its_place():
    from monitors.phases import SPANS, think_span

    tool_only = tuple(s for s in SPANS if s[2] == TOOL)  # a tokenizer with a tool call's markers and no think span's
    assert think_span(tool_only) is None and think_span(tuple(reversed(SPANS)))[0] == "<think>"
    assert PhaseSplit(spans=tool_only, thinking=True).phase == ANSWER  # no span to be inside of
    pieces, _ = run(["</tool_call>", "x"], spans=tool_only)
    assert {p.phase for p in pieces} == {ANSWER}
