from monitors.routing import idle_share, imbalance, load_text, step_weight_bytes


def test_imbalance_is_the_busiest_expert_over_the_mean_and_idle_ones_are_counted():
    assert imbalance([4, 4, 4, 4]) == 1.0
    assert imbalance([8, 0, 0, 0]) == 4.0  # one expert took all: the number of experts
    assert imbalance([3, 1, 0, 0]) == 3.0  # max 3, mean 1
    assert imbalance([0, 0]) is None
    assert idle_share([3, 1, 0, 0]) == 0.5 and idle_share([1, 1]) == 0.0


def test_the_line_names_the_mean_the_worst_layer_and_the_idle_share():
    assert load_text([[4, 4, 4, 4], [3, 1, 0, 0]]) == "experts max/mean 2.00 (layer 1 3.00), 25% never chosen"
    assert load_text([[0, 0]]) == "experts: no position routed"


def test_a_steps_weights_are_one_tokens_with_its_routed_share_replaced_by_what_it_touched():
    routing = {"layers": 3, "experts": 8, "top_k": 2, "shared": 0}
    # 1000 bytes besides the experts, and one token's 3 × 2 experts of 100 bytes
    assert step_weight_bytes(1600, 100, routing, 6) == 1600
    assert step_weight_bytes(1600, 100, routing, 24) == 1000 + 24 * 100  # every expert of every layer
    assert step_weight_bytes(1600, 100, None, 24) == step_weight_bytes(1600, 0, routing, 24) == step_weight_bytes(1600, 100, routing, None) == 1600
