from monitors.routing import idle_share, imbalance, load_text


def test_imbalance_is_the_busiest_expert_over_the_mean_and_idle_ones_are_counted():
    assert imbalance([4, 4, 4, 4]) == 1.0
    assert imbalance([8, 0, 0, 0]) == 4.0  # one expert took all: the number of experts
    assert imbalance([3, 1, 0, 0]) == 3.0  # max 3, mean 1
    assert imbalance([0, 0]) is None
    assert idle_share([3, 1, 0, 0]) == 0.5 and idle_share([1, 1]) == 0.0


def test_the_line_names_the_mean_the_worst_layer_and_the_idle_share():
    assert load_text([[4, 4, 4, 4], [3, 1, 0, 0]]) == "experts max/mean 2.00 (layer 1 3.00), 25% never chosen"
    assert load_text([[0, 0]]) == "experts: no position routed"
